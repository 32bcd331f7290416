// LanguageModel (language_model.h): nanoGPT's training recipe and sampling as a LightningModule,
// and its weights file.
#include "tessera/train/language_model.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/lr_scheduler.h"
#include "tessera/train/safetensors.h"
#include "tessera/train/serialize.h"
#include "tessera/train/text_data.h"

namespace tessera::train {

namespace {

constexpr const char* kHex = "0123456789abcdef";

std::string to_hex(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

GPTConfig with_vocab(GPTConfig c, const std::string& vocab) {
  check_vocab(vocab);
  c.vocab_size = static_cast<std::int64_t>(vocab.size());
  return c;
}

}  // namespace

LanguageModel::LanguageModel(GPTConfig config, std::string vocab, LanguageModelOptions options,
                             Generator* gen)
    : gpt_(std::make_shared<GPT>(with_vocab(config, vocab), gen)),
      vocab_(std::move(vocab)),
      options_(options) {
  const LanguageModelOptions& o = options;
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!finite_nonneg(o.lr) || !(o.min_lr < 0 || finite_nonneg(o.min_lr)) ||
      !finite_nonneg(o.weight_decay) || !finite_nonneg(o.eps) || !(o.beta1 >= 0 && o.beta1 < 1) ||
      !(o.beta2 >= 0 && o.beta2 < 1) || o.warmup_steps < 0 || o.max_steps < 0)
    throw InvalidArgument(fmt::format(
        "LanguageModel: options out of range (lr {}, min_lr {}, weight_decay {}, eps {}, betas "
        "({}, {}), warmup_steps {}, max_steps {}): lr, weight_decay and eps must be finite and "
        ">= 0, betas in [0, 1), step counts >= 0",
        o.lr, o.min_lr, o.weight_decay, o.eps, o.beta1, o.beta2, o.warmup_steps, o.max_steps));
  for (const auto& [name, child] : gpt_->named_children()) register_module(name, child);
}

std::string LanguageModel::describe() const {
  return gpt_->describe();
}

Variable LanguageModel::training_step(const TensorBatch& batch, std::int64_t) {
  const Variable loss = cross_entropy(gpt_->forward(batch[0]), batch[1]);
  LogOptions o;
  o.prog_bar = true;
  log("train_loss", loss, o);
  return loss;
}

void LanguageModel::validation_step(const TensorBatch& batch, std::int64_t) {
  const Variable loss = cross_entropy(gpt_->forward(batch[0]), batch[1]);
  LogOptions o;
  o.prog_bar = true;
  o.batch_size = batch.size;
  log("val_loss", loss, o);
}

OptimizerConfig LanguageModel::configure_optimizers() {
  const LanguageModelOptions& o = options_;
  ParamGroupOptions decay, no_decay;
  decay.weight_decay = o.weight_decay;
  no_decay.weight_decay = 0.0;
  for (const NamedParameter& p : named_parameters())
    (p.variable->shape().rank() >= 2 ? decay : no_decay).params.push_back(p);
  std::vector<ParamGroupOptions> groups;
  for (ParamGroupOptions* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  AdamWOptions ao;
  ao.lr = o.lr;
  ao.beta1 = o.beta1;
  ao.beta2 = o.beta2;
  ao.eps = o.eps;
  ao.weight_decay = o.weight_decay;
  auto opt = std::make_shared<AdamW>(std::move(groups), ao);
  OptimizerConfig config;
  config.optimizer = opt;
  config.interval = "step";
  const std::int64_t warmup = std::min(o.warmup_steps, o.max_steps);
  const std::int64_t decay_steps = o.max_steps - warmup;
  const double min_lr = o.min_lr < 0 ? o.lr / 10 : o.min_lr;
  std::shared_ptr<LRScheduler> warm, cosine;
  if (warmup > 1)  // factor (step + 1) / warmup at step 0 .. warmup - 1
    warm = std::make_shared<LinearLR>(*opt, 1.0 / static_cast<double>(warmup), 1.0, warmup - 1);
  if (decay_steps > 0 && o.cosine)
    cosine = std::make_shared<CosineAnnealingLR>(*opt, decay_steps, min_lr);
  if (warm && cosine)
    config.lr_scheduler = std::make_shared<SequentialLR>(
        *opt, std::vector<std::shared_ptr<LRScheduler>>{warm, cosine},
        std::vector<std::int64_t>{warmup});
  else
    config.lr_scheduler = warm ? warm : cosine;
  return config;
}

std::vector<std::int32_t> LanguageModel::generate(std::vector<std::int32_t> prompt,
                                                  std::int64_t max_new_tokens, double temperature,
                                                  std::int64_t top_k, std::uint64_t seed) {
  const bool was_training = is_training();
  eval();  // the whole tree (the GPT's modules are this module's children)
  std::vector<std::int32_t> out;
  try {
    out = train::generate(*gpt_, std::move(prompt), max_new_tokens, temperature, top_k, seed);
  } catch (...) {
    train(was_training);
    throw;
  }
  train(was_training);
  return out;
}

std::string LanguageModel::generate_text(std::string_view prompt, std::int64_t max_new_tokens,
                                         double temperature, std::int64_t top_k,
                                         std::uint64_t seed) {
  const std::size_t newline = vocab_.find('\n');
  std::vector<std::int32_t> ids =
      !prompt.empty()                ? encode_text(vocab_, prompt)
      : newline != std::string::npos ? std::vector<std::int32_t>{static_cast<std::int32_t>(newline)}
                                     : std::vector<std::int32_t>{0};
  const std::vector<std::int32_t> out =
      generate(std::move(ids), max_new_tokens, temperature, top_k, seed);
  const std::string text = decode_text(vocab_, out);
  return prompt.empty() ? text.substr(1) : text;
}

std::map<std::string, std::string> LanguageModel::hyperparameters() const {
  const GPTConfig& c = gpt_->config();
  return {{"tessera.model", "gpt"},
          {"gpt.vocab_size", std::to_string(c.vocab_size)},
          {"gpt.block_size", std::to_string(c.block_size)},
          {"gpt.n_layer", std::to_string(c.n_layer)},
          {"gpt.n_head", std::to_string(c.n_head)},
          {"gpt.n_embd", std::to_string(c.n_embd)},
          {"gpt.dropout", fmt::format("{}", c.dropout)},
          {"gpt.bias", c.bias ? "true" : "false"},
          {"gpt.vocab", to_hex(vocab_)}};
}

GPTSpec read_gpt_hyperparameters(const std::map<std::string, std::string>& meta,
                                 const std::string& source) {
  auto get = [&](const std::string& key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end())
      throw FileError(fmt::format(
          "{}: metadata '{}' is missing: this is not a GPT written by tessera-train (it stores "
          "the model's configuration and vocabulary with its weights)",
          source, key));
    return it->second;
  };
  auto fail = [&](const std::string& key, const std::string& want) {
    return FileError(
        fmt::format("{}: metadata '{}' is \"{}\"; expected {}", source, key, get(key), want));
  };
  auto positive = [&](const std::string& key) {
    const std::string& s = get(key);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || s[0] == '-' || s[0] == '+' || ec != std::errc() ||
        end != s.data() + s.size() || v <= 0)
      throw fail(key, "a positive decimal integer");
    return v;
  };
  if (get("tessera.model") != "gpt") throw fail("tessera.model", "\"gpt\"");
  GPTSpec spec;
  GPTConfig& c = spec.config;
  c.vocab_size = positive("gpt.vocab_size");
  c.block_size = positive("gpt.block_size");
  const std::int64_t layers = positive("gpt.n_layer"), heads = positive("gpt.n_head");
  if (layers > 1 << 20) throw fail("gpt.n_layer", "at most 2^20");
  if (heads > 1 << 20) throw fail("gpt.n_head", "at most 2^20");
  c.n_layer = static_cast<int>(layers);
  c.n_head = static_cast<int>(heads);
  c.n_embd = positive("gpt.n_embd");
  {
    const std::string& s = get("gpt.dropout");
    double d = -1;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec != std::errc() || end != s.data() + s.size() || !(d >= 0 && d < 1))
      throw fail("gpt.dropout", "a number in [0, 1)");
    c.dropout = d;
  }
  const std::string& bias = get("gpt.bias");
  if (bias != "true" && bias != "false") throw fail("gpt.bias", "true or false");
  c.bias = bias == "true";
  const std::string& hex = get("gpt.vocab");
  auto nibble = [](char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
  };
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) break;
    spec.vocab += static_cast<char>(hi * 16 + lo);
  }
  if (hex.empty() || spec.vocab.size() * 2 != hex.size())
    throw fail("gpt.vocab", "the vocabulary's bytes as lower-case hex digits");
  try {
    check_vocab(spec.vocab);
  } catch (const InvalidArgument& e) {
    throw FileError(fmt::format("{}: metadata 'gpt.vocab': {}", source, e.what()));
  }
  if (static_cast<std::int64_t>(spec.vocab.size()) != c.vocab_size)
    throw FileError(
        fmt::format("{}: metadata 'gpt.vocab' holds {} characters but gpt.vocab_size is {}", source,
                    spec.vocab.size(), c.vocab_size));
  return spec;
}

void save_language_model(LanguageModel& model, const std::filesystem::path& path) {
  std::map<std::string, std::string> meta = model.hyperparameters();
  meta["format"] = "pt";
  save_state_dict(model.state_dict(), path, meta);
}

std::shared_ptr<LanguageModel> load_language_model(const std::filesystem::path& path,
                                                   Device* device) {
  SafetensorsContents file = load_safetensors(path, device);
  // A checkpoint holds the hyperparameters as "hparams.KEY" (LightningModule's).
  std::map<std::string, std::string> meta = file.metadata;
  if (!meta.count("tessera.model"))
    for (const auto& [k, v] : file.metadata)
      if (k.starts_with("hparams.")) meta[k.substr(8)] = v;
  const GPTSpec spec = read_gpt_hyperparameters(meta, path.string());
  std::shared_ptr<LanguageModel> model;
  {
    DeviceGuard guard(device ? *device : default_device());
    Generator gen(0);
    model = std::make_shared<LanguageModel>(spec.config, spec.vocab, LanguageModelOptions{}, &gen);
  }
  StateDict state;
  for (auto& [name, tensor] : file.tensors)
    if (!name.starts_with("optimizer.")) state.emplace_back(name, std::move(tensor));
  try {
    model->load_state_dict(state);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path.string(), e.what()));
  }
  model->eval();
  return model;
}

}  // namespace tessera::train
