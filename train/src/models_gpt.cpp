// GPT (gpt.h): nanoGPT's model and its generate(), as bench/models_peer.py's twin.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/gpt.h"
#include "tessera/train/init.h"

namespace tessera::train {

namespace {

void normal_(Variable& v, double std, Generator& g) {
  v.set_value(init::normal(v.shape(), 0.0f, static_cast<float>(std), g, &v.value().device()));
}

void zeros_(Variable& v) {
  if (v.defined())
    v.set_value(Tensor::full(v.shape(), 0.0, v.value().dtype(), &v.value().device()));
}

}  // namespace

GPTMLP::GPTMLP(std::int64_t n_embd, double p, bool bias, Generator* gen) {
  c_fc = register_module(
      "c_fc", std::make_shared<Linear>(n_embd, 4 * n_embd, bias, Init::torch_default, gen));
  c_proj = register_module(
      "c_proj", std::make_shared<Linear>(4 * n_embd, n_embd, bias, Init::torch_default, gen));
  dropout = register_module("dropout", std::make_shared<Dropout>(static_cast<float>(p)));
}

Variable GPTMLP::forward(const Variable& x) {
  return (*dropout)((*c_proj)(gelu((*c_fc)(x))));
}

GPTBlock::GPTBlock(std::int64_t n_embd, int n_head, double p, bool bias, Generator* gen) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(n_embd));
  attn =
      register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, p, bias, gen));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(n_embd));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(n_embd, p, bias, gen));
}

Variable GPTBlock::forward(const Variable& x) {
  const Variable y = add(x, (*attn)((*ln_1)(x)));
  return add(y, (*mlp)((*ln_2)(y)));
}

GPT::GPT(GPTConfig config, Generator* gen) : config_(config) {
  const GPTConfig& c = config_;
  if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 ||
      c.n_embd % c.n_head != 0 || !(c.dropout >= 0 && c.dropout < 1))
    throw InvalidArgument(fmt::format(
        "GPT(vocab_size={}, block_size={}, n_layer={}, n_head={}, n_embd={}, dropout={}): sizes "
        "must be positive, n_head must divide n_embd and dropout be in [0, 1)",
        c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.dropout));
  Generator& g = gen ? *gen : default_init_generator();
  transformer = register_module("transformer", std::make_shared<ModuleDict>());
  wte = std::make_shared<Embedding>(c.vocab_size, c.n_embd, std::nullopt, &g);
  wpe = std::make_shared<Embedding>(c.block_size, c.n_embd, std::nullopt, &g);
  drop = std::make_shared<Dropout>(static_cast<float>(c.dropout));
  h = std::make_shared<ModuleList>();
  for (int i = 0; i < c.n_layer; ++i)
    h->push_back(std::make_shared<GPTBlock>(c.n_embd, c.n_head, c.dropout, c.bias, &g));
  ln_f = std::make_shared<LayerNorm>(c.n_embd);
  transformer->insert("wte", wte);
  transformer->insert("wpe", wpe);
  transformer->insert("drop", drop);
  transformer->insert("h", h);
  transformer->insert("ln_f", ln_f);
  lm_head = register_module(
      "lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false, Init::torch_default, &g));
  // Weight tying: lm_head's registered parameter becomes wte's Variable (copies share the node),
  // so both names hold one leaf, which named_parameters() lists once.
  for (NamedParameter& p : lm_head->named_parameters(false))
    if (p.name == "weight") *p.variable = wte->weight;
  lm_head->weight = wte->weight;

  // nanoGPT's _init_weights, then the scaled residual projections.
  for (Module* m : modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      normal_(lin->weight, 0.02, g);
      zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      normal_(emb->weight, 0.02, g);
    }
  }
  const double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (NamedParameter& p : named_parameters())
    if (p.name.ends_with("c_proj.weight")) normal_(*p.variable, proj_std, g);
}

Variable GPT::forward(const Tensor& idx) {
  const Shape& s = idx.shape();
  if (s.rank() != 2 || (idx.dtype() != DType::i32 && idx.dtype() != DType::i64) || s[1] < 1)
    throw InvalidArgument(
        fmt::format("GPT: expects token ids [B, T] of dtype i32 or i64 with T >= 1, got {} {}",
                    dtype_name(idx.dtype()), s.str()));
  if (s[1] > config_.block_size)
    throw InvalidArgument(fmt::format(
        "GPT: cannot forward a sequence of length {}, the block size is only {} (crop the "
        "context to the last {} tokens)",
        s[1], config_.block_size, config_.block_size));
  Device& device = wte->weight.value().device();
  if (!positions_.defined() || &positions_.device() != &device) {
    std::vector<std::int32_t> pos(static_cast<std::size_t>(config_.block_size));
    std::iota(pos.begin(), pos.end(), 0);
    positions_ = Tensor::from<std::int32_t>(pos, Shape{config_.block_size}, &device);
  }
  Variable x = add(wte->forward(idx), wpe->forward(positions_.narrow(0, 0, s[1])));
  x = (*drop)(x);
  for (const std::shared_ptr<Module>& block : *h) x = block->forward(x);
  return (*lm_head)((*ln_f)(x));
}

std::vector<std::int32_t> generate(GPT& model, std::vector<std::int32_t> ids,
                                   std::int64_t max_new_tokens, double temperature,
                                   std::int64_t top_k, std::uint64_t seed) {
  const std::int64_t vocab = model.config().vocab_size;
  if (ids.empty()) throw InvalidArgument("generate: the prompt is empty (give at least one token)");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InvalidArgument(
          fmt::format("generate: prompt token {} at position {} is outside the vocabulary [0, {})",
                      ids[i], i, vocab));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw InvalidArgument(fmt::format(
        "generate: temperature must be a finite number >= 0 (0: greedy), got {}", temperature));
  if (top_k < 0 || max_new_tokens < 0)
    throw InvalidArgument(
        fmt::format("generate: top_k ({}) and max_new_tokens ({}) must not be negative", top_k,
                    max_new_tokens));
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Device& device = model.wte->weight.value().device();
  Generator gen(seed);
  const std::int64_t k = top_k == 0 ? vocab : std::min(top_k, vocab);
  std::vector<double> p(static_cast<std::size_t>(vocab));
  std::vector<std::int64_t> order(p.size());
  try {
    for (std::int64_t step = 0; step < max_new_tokens; ++step) {
      const auto n = static_cast<std::int64_t>(ids.size());
      const std::int64_t t = std::min(n, model.config().block_size);
      const Tensor idx = Tensor::from<std::int32_t>(
          std::span<const std::int32_t>(ids.data() + (n - t), static_cast<std::size_t>(t)),
          Shape{1, t}, &device);
      const Tensor last = tessera::copy(model.forward(idx).value().select(1, t - 1));
      const std::vector<float> logits = last.to_vector<float>();
      std::iota(order.begin(), order.end(), 0);
      // Highest first; ties by the lower id, so that greedy decoding is deterministic.
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
      });
      std::int64_t next = order[0];
      if (temperature > 0) {
        const double top = logits[static_cast<std::size_t>(order[0])] / temperature;
        double total = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          const auto j = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
          p[j] = std::exp(logits[j] / temperature - top);
          total += p[j];
        }
        // u in [0, total): walk the candidates in order until their mass passes it.
        double u = static_cast<double>(gen.next_u64() >> 11) * 0x1.0p-53 * total;
        for (std::int64_t i = 0; i < k; ++i) {
          next = order[static_cast<std::size_t>(i)];
          u -= p[static_cast<std::size_t>(next)];
          if (u < 0) break;
        }
      }
      ids.push_back(static_cast<std::int32_t>(next));
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return ids;
}

}  // namespace tessera::train
