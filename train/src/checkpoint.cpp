#include "tessera/train/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "parse.h"
#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/train/autocast.h"
#include "tessera/train/lightning.h"
#include "tessera/train/safetensors.h"
#include "trainer_steps.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kOptimizerPrefix = "optimizer.";
constexpr std::string_view kSchedulerPrefix = "scheduler.";
constexpr std::string_view kCallbackPrefix = "callback.";
constexpr std::string_view kHparamsPrefix = "hparams.";  // LightningModule::hyperparameters()
constexpr const char* kFormat = "tessera-checkpoint-2";

nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

[[noreturn]] void malformed(const fs::path& path, const std::string& what) {
  throw FileError(fmt::format("{}: malformed checkpoint: {}", path.string(), what));
}

std::string history_json(const std::vector<MetricsRow>& history) {
  nlohmann::json a = nlohmann::json::array();
  for (const MetricsRow& r : history) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [k, v] : r.metrics) m[k] = number(v);
    a.push_back({{"epoch", r.epoch},
                 {"step", r.step},
                 {"lr", number(r.lr)},
                 {"metrics", m},
                 {"seconds", number(r.seconds)},
                 {"samples_per_second", number(r.samples_per_second)}});
  }
  return a.dump();
}

nlohmann::json parse_json(const fs::path& path, const std::string& key, const std::string& s) {
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, fmt::format("metadata '{}' is not JSON ({})", key, e.what()));
  }
}

// A figure: a finite number, or null for "not measured" (NaN).
double figure(const fs::path& path, const nlohmann::json& v, const std::string& where) {
  if (v.is_null()) return std::nan("");
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    malformed(path, fmt::format("{} is {}, expected a number or null", where, v.dump()));
  return v.get<double>();
}

std::int64_t count(const fs::path& path, const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
    malformed(path, fmt::format("{} is {}, expected an integer of 0 or more", where, v.dump()));
  return v.get<std::int64_t>();
}

// The history as save_checkpoint writes it: rows of exactly these keys, (epoch, step) increasing.
std::vector<MetricsRow> parse_history(const fs::path& path, const std::string& s) {
  const nlohmann::json a = parse_json(path, "history", s);
  if (!a.is_array()) malformed(path, "metadata 'history' is not a JSON array");
  static const std::set<std::string> kKeys{"epoch",   "step",    "lr",
                                           "metrics", "seconds", "samples_per_second"};
  std::vector<MetricsRow> out;
  for (const auto& j : a) {
    const std::string where = fmt::format("metadata 'history' row {}", out.size());
    if (!j.is_object() || j.size() != kKeys.size())
      malformed(path,
                fmt::format("{} is not an object of the keys {}", where, fmt::join(kKeys, ", ")));
    for (const std::string& key : kKeys)
      if (!j.contains(key)) malformed(path, fmt::format("{} has no '{}'", where, key));
    MetricsRow r;
    r.epoch = count(path, j.at("epoch"), where + " 'epoch'");
    r.step = count(path, j.at("step"), where + " 'step'");
    if (r.epoch < 1) malformed(path, fmt::format("{} 'epoch' is 0; epochs count from 1", where));
    if (!out.empty() && std::pair(r.epoch, r.step) <= std::pair(out.back().epoch, out.back().step))
      malformed(path, fmt::format("{} (epoch {}, step {}) does not follow the row before it "
                                  "(epoch {}, step {})",
                                  where, r.epoch, r.step, out.back().epoch, out.back().step));
    r.lr = figure(path, j.at("lr"), where + " 'lr'");
    r.seconds = figure(path, j.at("seconds"), where + " 'seconds'");
    r.samples_per_second =
        figure(path, j.at("samples_per_second"), where + " 'samples_per_second'");
    if (!j.at("metrics").is_object())
      malformed(path, fmt::format("{} 'metrics' is not an object", where));
    for (const auto& [k, v] : j.at("metrics").items())
      r.metrics[k] = figure(path, v, fmt::format("{} metric '{}'", where, k));
    out.push_back(std::move(r));
  }
  return out;
}

MetricSum sum_of(const fs::path& path, const nlohmann::json& v, const std::string& where) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() ||
      !std::isfinite(v[0].get<double>()) || !(v[1].get<double>() >= 0) ||
      !std::isfinite(v[1].get<double>()))
    malformed(path, fmt::format("{} is {}, expected [sum, weight] (finite, weight 0 or more)",
                                where, v.dump()));
  return {v[0].get<double>(), v[1].get<double>()};
}

// What does not hold of |p| for a run's progress, or empty.
std::string inconsistency(const TrainingProgress& p) {
  if (p.epoch < 0 || p.epoch_batch < 0 || p.global_step < 0 || p.batches_seen < 0)
    return fmt::format(
        "epoch {}, epoch_batch {}, global_step {}, batches_seen {}: expected 0 or "
        "more",
        p.epoch, p.epoch_batch, p.global_step, p.batches_seen);
  if (p.global_step < p.epoch)
    return fmt::format("global_step is {} after {} epochs: every epoch takes at least one step",
                       p.global_step, p.epoch);
  if (p.batches_seen < p.global_step || p.batches_seen < p.epoch_batch)
    return fmt::format(
        "batches_seen is {} for {} steps and {} batches of this epoch: every step "
        "takes at least one batch",
        p.batches_seen, p.global_step, p.epoch_batch);
  if (p.world_size < 1)
    return fmt::format("world_size is {}: expected 1 or more processes", p.world_size);
  if (p.epoch_sample < -1 || (p.epoch_batch == 0 && p.epoch_sample != 0))
    return fmt::format("epoch_sample is {} after {} batch(es) of the epoch", p.epoch_sample,
                       p.epoch_batch);
  if (p.epoch_batch == 0 && (!p.epoch_sums.empty() || p.epoch_loss.weight != 0))
    return "epoch sums are given at an epoch's end (epoch_batch 0)";
  // Rows belong to epochs done, or to the epoch under way.
  if (!p.history.empty() && p.history.back().epoch > p.epoch + (p.epoch_batch > 0 ? 1 : 0))
    return fmt::format("the history has rows of epoch {} after {} epoch(s) and {} batch(es) done",
                       p.history.back().epoch, p.epoch, p.epoch_batch);
  return {};
}

// The module's tensors in state_dict order (parameters and buffers).
StateDict model_tensors(Module& model) {
  return model.state_dict();
}

}  // namespace

void save_checkpoint(const fs::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress, const LRScheduler* scheduler) {
  if (const std::string bad = inconsistency(progress); !bad.empty())
    throw InvalidArgument(fmt::format("save_checkpoint {}: {}", path.string(), bad));
  std::vector<std::pair<std::string, Tensor>> tensors = model_tensors(model);
  OptimizerState os = optimizer.state();
  for (auto& [name, t] : os.tensors) tensors.emplace_back(std::string(kOptimizerPrefix) + name, t);
  nlohmann::json sums = nlohmann::json::object();
  for (const auto& [k, s] : progress.epoch_sums) sums[k] = {s.sum, s.weight};
  std::map<std::string, std::string> meta{
      {"format", kFormat},
      {"epoch", std::to_string(progress.epoch)},
      {"epoch_batch", std::to_string(progress.epoch_batch)},
      {"global_step", std::to_string(progress.global_step)},
      {"batches_seen", std::to_string(progress.batches_seen)},
      {"seed", std::to_string(progress.seed)},
      {"model", model.describe()},
      {"optimizer", optimizer.name()},
      {"lr", fmt::format("{}", optimizer.lr())},
      {"history", history_json(progress.history)},
      {"epoch_sums", sums.dump()},
      {"epoch_loss", nlohmann::json{progress.epoch_loss.sum, progress.epoch_loss.weight}.dump()},
      {"lr_scheduler", scheduler ? "present" : "none"},
      {"world_size", std::to_string(progress.world_size)}};
  if (progress.epoch_sample >= 0) meta["epoch_sample"] = std::to_string(progress.epoch_sample);
  for (const auto& [k, v] : os.values) meta[std::string(kOptimizerPrefix) + k] = v;
  if (scheduler)
    for (const auto& [k, v] : detail::scheduler_state(*scheduler))
      meta[std::string(kSchedulerPrefix) + k] = v;
  for (const auto& [key, state] : progress.callbacks) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, v] : state) o[k] = v;
    meta[std::string(kCallbackPrefix) + key] = o.dump();
  }
  if (!progress.grad_scaler.empty()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, v] : progress.grad_scaler) o[k] = v;
    meta["grad_scaler"] = o.dump();
  }
  if (const auto* lm = dynamic_cast<const LightningModule*>(&model))
    for (const auto& [k, v] : lm->hyperparameters()) meta[std::string(kHparamsPrefix) + k] = v;
  save_safetensors(path, tensors, meta);
}

TrainingProgress load_checkpoint(const fs::path& path, Module& model, Optimizer& optimizer,
                                 LRScheduler* scheduler) {
  const auto mine = model_tensors(model);
  if (mine.empty()) throw InvalidArgument("load_checkpoint: the model has no parameters");
  Device& device = mine.front().second.device();
  SafetensorsContents c = load_safetensors(path, &device);

  // Metadata: every key known, every value well-formed, before anything is used.
  static const std::set<std::string> kKeys{
      "format",       "epoch",      "epoch_batch",  "global_step", "batches_seen", "seed",
      "model",        "optimizer",  "lr",           "history",     "epoch_sums",   "epoch_loss",
      "lr_scheduler", "world_size", "epoch_sample", "grad_scaler"};
  OptimizerState os;
  std::map<std::string, std::string> scheduler_state;
  TrainingProgress progress;
  for (const auto& [k, v] : c.metadata) {
    if (k.starts_with(kOptimizerPrefix)) {
      os.values[k.substr(kOptimizerPrefix.size())] = v;
    } else if (k.starts_with(kSchedulerPrefix)) {
      scheduler_state[k.substr(kSchedulerPrefix.size())] = v;
    } else if (k.starts_with(kCallbackPrefix)) {
      const nlohmann::json o = parse_json(path, k, v);
      if (!o.is_object()) malformed(path, fmt::format("metadata '{}' is not a JSON object", k));
      auto& state = progress.callbacks[k.substr(kCallbackPrefix.size())];
      for (const auto& [name, value] : o.items()) {
        if (!value.is_string())
          malformed(path, fmt::format("metadata '{}' entry '{}' is not a string", k, name));
        state[name] = value.get<std::string>();
      }
    } else if (k.starts_with(kHparamsPrefix)) {
      // The module's hyperparameters: what rebuilds it (tessera-generate), not training state.
    } else if (!kKeys.count(k)) {
      malformed(path, fmt::format("metadata '{}' is not part of a checkpoint (it has {}, and "
                                  "keys starting {}, {}, {} or {})",
                                  k, fmt::join(kKeys, ", "), kOptimizerPrefix, kSchedulerPrefix,
                                  kCallbackPrefix, kHparamsPrefix));
    }
  }
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = c.metadata.find(key);
    if (it == c.metadata.end())
      throw FileError(fmt::format("{}: not a Tessera checkpoint: metadata '{}' is missing",
                                  path.string(), key));
    return it->second;
  };
  if (meta("format") != kFormat)
    throw FileError(fmt::format("{}: checkpoint format '{}' is not {}", path.string(),
                                meta("format"), kFormat));
  auto integer = [&]<typename T>(const std::string& key, T) {
    const auto v = detail::parse_integer<T>(meta(key));
    bool negative = false;
    if constexpr (std::is_signed_v<T>) negative = v && *v < 0;
    if (!v || negative)
      malformed(path, fmt::format("metadata '{}' is '{}', expected 0 to {} in decimal digits", key,
                                  meta(key), std::numeric_limits<T>::max()));
    return *v;
  };
  progress.epoch = integer("epoch", std::int64_t{});
  progress.epoch_batch = integer("epoch_batch", std::int64_t{});
  progress.global_step = integer("global_step", std::int64_t{});
  progress.batches_seen = integer("batches_seen", std::int64_t{});
  progress.seed = integer("seed", std::uint64_t{});
  // Optional (files of one process written before they existed lack them).
  if (c.metadata.count("world_size")) {
    progress.world_size = integer("world_size", int{});
    if (progress.world_size < 1)
      malformed(path, "metadata 'world_size' is '0', expected 1 or more processes");
  }
  progress.epoch_sample = c.metadata.count("epoch_sample") ? integer("epoch_sample", std::int64_t{})
                          : progress.epoch_batch > 0       ? -1
                                                           : 0;
  progress.history = parse_history(path, meta("history"));
  {
    const nlohmann::json sums = parse_json(path, "epoch_sums", meta("epoch_sums"));
    if (!sums.is_object()) malformed(path, "metadata 'epoch_sums' is not a JSON object");
    for (const auto& [k, v] : sums.items())
      progress.epoch_sums[k] = sum_of(path, v, fmt::format("metadata 'epoch_sums' '{}'", k));
    progress.epoch_loss =
        sum_of(path, parse_json(path, "epoch_loss", meta("epoch_loss")), "metadata 'epoch_loss'");
  }
  if (c.metadata.count("grad_scaler")) {
    const nlohmann::json o = parse_json(path, "grad_scaler", meta("grad_scaler"));
    if (!o.is_object()) malformed(path, "metadata 'grad_scaler' is not a JSON object");
    for (const auto& [name, value] : o.items()) {
      if (!value.is_string())
        malformed(path, fmt::format("metadata 'grad_scaler' entry '{}' is not a string", name));
      progress.grad_scaler[name] = value.get<std::string>();
    }
    if (const std::string bad = GradScaler::check_state(progress.grad_scaler); !bad.empty())
      malformed(path, "metadata 'grad_scaler': " + bad);
  }
  if (const std::string bad = inconsistency(progress); !bad.empty()) malformed(path, bad);
  if (const auto lr = detail::parse_number(meta("lr")); !lr || *lr < 0)
    malformed(path,
              fmt::format("metadata 'lr' is '{}', expected a non-negative number", meta("lr")));
  if (meta("model").empty()) malformed(path, "metadata 'model' is empty");
  const std::string& has_scheduler = meta("lr_scheduler");
  if (has_scheduler != "present" && has_scheduler != "none")
    malformed(path, fmt::format("metadata 'lr_scheduler' is '{}', expected present or none",
                                has_scheduler));
  if (has_scheduler == "none" && !scheduler_state.empty())
    malformed(path, "metadata 'lr_scheduler' is none but scheduler state is present");
  if (meta("optimizer") != optimizer.name())
    throw InvalidArgument(fmt::format(
        "{}: the checkpoint was written with optimizer '{}', this run uses '{}'; resume with "
        "the same optimizer",
        path.string(), meta("optimizer"), optimizer.name()));
  if ((has_scheduler == "present") != (scheduler != nullptr))
    throw InvalidArgument(fmt::format(
        "{}: the checkpoint was written {} a learning-rate scheduler and this run has {}; resume "
        "with the same configure_optimizers",
        path.string(), has_scheduler == "present" ? "with" : "without",
        scheduler ? "one" : "none"));
  // The optimizer's own step counter, when it keeps one, counts the same steps as global_step.
  // (A step that is no count at all is load_state's error.)
  if (auto it = os.values.find("step"); it != os.values.end())
    if (const auto step = detail::parse_integer<std::int64_t>(it->second);
        step && *step != progress.global_step)
      malformed(path, fmt::format("metadata '{}step' is '{}' but global_step is {}: both count the "
                                  "optimizer's steps",
                                  kOptimizerPrefix, it->second, progress.global_step));

  // Match every tensor of the model before touching it.
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : c.tensors) {
    if (name.starts_with(kOptimizerPrefix))
      os.tensors.emplace_back(name.substr(kOptimizerPrefix.size()), t);
    else
      by_name[name] = t;
  }
  std::set<std::string> names;
  for (const auto& [name, t] : mine) {
    names.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' is missing; the checkpoint holds another model ({})",
                      path.string(), name, meta("model")));
    if (!(it->second.shape() == t.shape()) || it->second.dtype() != t.dtype())
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' is {} {} in the checkpoint, {} {} in the model",
                      path.string(), name, dtype_name(it->second.dtype()), it->second.shape().str(),
                      dtype_name(t.dtype()), t.shape().str()));
  }
  for (const auto& [name, t] : by_name)
    if (!names.count(name))
      throw InvalidArgument(
          fmt::format("{}: tensor '{}' is not a parameter or buffer of the model; the checkpoint "
                      "holds another model ({})",
                      path.string(), name, meta("model")));
  if (meta("model") != model.describe())
    tessera::log().warn(
        "{}: the checkpoint's model description differs from this model's; its tensors match, "
        "resuming",
        path.string());
  // The optimizer and the scheduler check their own entries and change nothing on error; the
  // optimizer is put back when the scheduler refuses its state.
  const OptimizerState before = optimizer.state();
  try {
    optimizer.load_state(os);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path.string(), e.what()));
  }
  if (scheduler) {
    try {
      detail::load_scheduler_state(*scheduler, scheduler_state);
    } catch (const InvalidArgument& e) {
      optimizer.load_state(before);
      throw InvalidArgument(fmt::format("{}: scheduler: {}", path.string(), e.what()));
    }
  }
  StateDict state;
  for (const auto& [name, t] : mine) state.emplace_back(name, by_name.at(name));
  model.load_state_dict(state);  // checked above: names, dtypes and shapes all match
  model.zero_grad();
  return progress;
}

std::string checkpoint_name(std::int64_t epoch) {
  return fmt::format("epoch-{:04}.safetensors", epoch);
}

std::optional<std::string_view> checkpoint_name_digits(std::string_view file_name) {
  constexpr std::string_view kPrefix = "epoch-", kSuffix = ".safetensors";
  if (file_name.size() <= kPrefix.size() + kSuffix.size() || !file_name.starts_with(kPrefix) ||
      !file_name.ends_with(kSuffix))
    return std::nullopt;
  const std::string_view digits =
      file_name.substr(kPrefix.size(), file_name.size() - kPrefix.size() - kSuffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return digits;
}

std::optional<fs::path> latest_checkpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) return std::nullopt;
  if (!fs::is_directory(st))
    throw FileError(
        fmt::format("{}: not a directory; checkpoints are files in a directory", dir.string()));
  std::optional<fs::path> best;
  int best_epoch = -1;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<std::string_view> digits = checkpoint_name_digits(name);
    if (!digits) continue;
    const auto e = detail::parse_integer<int>(*digits);
    if (!e)
      throw FileError(fmt::format(
          "{}: the epoch number in the file name is more than {}; rename or remove the file",
          it->path().string(), std::numeric_limits<int>::max()));
    // Of two names for one epoch (epoch-3, epoch-0003) the one save_checkpoint writes wins.
    if (*e > best_epoch || (*e == best_epoch && name == checkpoint_name(*e))) {
      best_epoch = *e;
      best = it->path();
    }
  }
  if (ec) throw FileError(fmt::format("{}: can not list it: {}", dir.string(), ec.message()));
  return best;
}

}  // namespace tessera::train
