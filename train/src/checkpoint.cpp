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
#include "tessera/train/safetensors.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kOptimizerPrefix = "optimizer.";
constexpr const char* kFormat = "tessera-checkpoint-1";

nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

std::string history_json(const std::vector<EpochMetrics>& history) {
  nlohmann::json a = nlohmann::json::array();
  for (const EpochMetrics& m : history)
    a.push_back({{"epoch", m.epoch},
                 {"train_loss", number(m.train_loss)},
                 {"train_accuracy", number(m.train_accuracy)},
                 {"test_loss", number(m.test_loss)},
                 {"test_accuracy", number(m.test_accuracy)},
                 {"seconds", number(m.seconds)},
                 {"samples_per_second", number(m.samples_per_second)}});
  return a.dump();
}

constexpr const char* kHistoryKeys[] = {
    "epoch",         "train_loss", "train_accuracy",    "test_loss",
    "test_accuracy", "seconds",    "samples_per_second"};

[[noreturn]] void malformed(const fs::path& path, const std::string& what) {
  throw FileError(fmt::format("{}: malformed checkpoint: {}", path.string(), what));
}

// The history as save_checkpoint writes it: one object per completed epoch, epochs 1, 2, ...,
// each with exactly kHistoryKeys, numbers finite (null for "not measured"), accuracies fractions,
// the others non-negative.
std::vector<EpochMetrics> parse_history(const fs::path& path, const std::string& s) {
  nlohmann::json a;
  try {
    a = nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, fmt::format("metadata 'history' is not JSON ({})", e.what()));
  }
  if (!a.is_array()) malformed(path, "metadata 'history' is not a JSON array");
  std::vector<EpochMetrics> out;
  for (const auto& j : a) {
    const std::size_t i = out.size();
    const auto where = [&](std::string_view key) {
      return fmt::format("metadata 'history' entry {} ('{}')", i, key);
    };
    if (!j.is_object() || j.size() != std::size(kHistoryKeys))
      malformed(path, fmt::format("metadata 'history' entry {} is not an object of the {} keys {}",
                                  i, std::size(kHistoryKeys), fmt::join(kHistoryKeys, ", ")));
    for (const char* key : kHistoryKeys)
      if (!j.contains(key))
        malformed(path, fmt::format("metadata 'history' entry {} has no '{}'", i, key));
    const auto& e = j.at("epoch");
    if (!e.is_number_integer() || e.get<std::int64_t>() != static_cast<std::int64_t>(i) + 1)
      malformed(path, fmt::format("{} is {}, expected {} (entries are epochs 1, 2, ... in order)",
                                  where("epoch"), e.dump(), i + 1));
    // A measured figure, or NaN for null; |hi| bounds accuracies.
    const auto figure = [&](const char* key, double hi) {
      const auto& v = j.at(key);
      if (v.is_null()) return std::nan("");
      const double d = v.is_number() ? v.get<double>() : std::nan("");
      if (!(d >= 0 && d <= hi))
        malformed(path, fmt::format("{} is {}, expected null or a number in [0, {}]", where(key),
                                    v.dump(), hi));
      return d;
    };
    constexpr double kAny = std::numeric_limits<double>::max();
    EpochMetrics m;
    m.epoch = static_cast<int>(i) + 1;
    m.train_loss = figure("train_loss", kAny);
    m.train_accuracy = figure("train_accuracy", 1);
    m.test_loss = figure("test_loss", kAny);
    m.test_accuracy = figure("test_accuracy", 1);
    m.seconds = figure("seconds", kAny);
    m.samples_per_second = figure("samples_per_second", kAny);
    out.push_back(m);
  }
  return out;
}

// What does not hold of |p| for a run's progress, or empty: epochs done 0 or more, one history
// entry per epoch (1, 2, ...), at least one step per epoch, steps within int64 (the optimizers'
// counters).
std::string inconsistency(const TrainingProgress& p) {
  if (p.epoch < 0) return fmt::format("epoch is {}, expected 0 or more", p.epoch);
  if (p.history.size() != static_cast<std::size_t>(p.epoch))
    return fmt::format("'history' has {} entries for epoch {}: expected one per epoch done",
                       p.history.size(), p.epoch);
  for (std::size_t i = 0; i < p.history.size(); ++i)
    if (p.history[i].epoch != static_cast<int>(i) + 1)
      return fmt::format("'history' entry {} is epoch {}, expected {}", i, p.history[i].epoch,
                         i + 1);
  if (p.global_step < static_cast<std::uint64_t>(p.epoch))
    return fmt::format("global_step is {} after {} epochs: every epoch takes at least one step",
                       p.global_step, p.epoch);
  if (p.global_step > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return fmt::format("global_step {} is more than {}", p.global_step,
                       std::numeric_limits<std::int64_t>::max());
  return {};
}

}  // namespace

void save_checkpoint(const fs::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress) {
  if (const std::string bad = inconsistency(progress); !bad.empty())
    throw InvalidArgument(fmt::format("save_checkpoint {}: {}", path.string(), bad));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const NamedParameter& p : model.named_parameters())
    tensors.emplace_back(p.name, p.variable->value());
  OptimizerState os = optimizer.state();
  for (auto& [name, t] : os.tensors) tensors.emplace_back(std::string(kOptimizerPrefix) + name, t);
  std::map<std::string, std::string> meta{{"format", kFormat},
                                          {"epoch", std::to_string(progress.epoch)},
                                          {"global_step", std::to_string(progress.global_step)},
                                          {"seed", std::to_string(progress.seed)},
                                          {"model", model.describe()},
                                          {"optimizer", optimizer.name()},
                                          {"lr", fmt::format("{}", optimizer.lr())},
                                          {"history", history_json(progress.history)}};
  for (const auto& [k, v] : os.values) meta[std::string(kOptimizerPrefix) + k] = v;
  save_safetensors(path, tensors, meta);
}

TrainingProgress load_checkpoint(const fs::path& path, Module& model, Optimizer& optimizer) {
  const auto params = model.named_parameters();
  if (params.empty()) throw InvalidArgument("load_checkpoint: the model has no parameters");
  Device& device = params.front().variable->value().device();
  SafetensorsContents c = load_safetensors(path, &device);

  // Metadata: every key known, every value well-formed, before anything is used.
  static const std::set<std::string> kKeys{"format", "epoch",     "global_step", "seed",
                                           "model",  "optimizer", "lr",          "history"};
  OptimizerState os;
  for (const auto& [k, v] : c.metadata) {
    if (k.rfind(kOptimizerPrefix, 0) == 0)
      os.values[k.substr(kOptimizerPrefix.size())] = v;
    else if (!kKeys.count(k))
      malformed(path, fmt::format("metadata '{}' is not part of a checkpoint (it has {})", k,
                                  fmt::join(kKeys, ", ")));
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
  TrainingProgress progress;
  progress.epoch = integer("epoch", int{});
  progress.global_step = integer("global_step", std::uint64_t{});
  progress.seed = integer("seed", std::uint64_t{});
  progress.history = parse_history(path, meta("history"));
  if (const std::string bad = inconsistency(progress); !bad.empty()) malformed(path, bad);
  if (const auto lr = detail::parse_number(meta("lr")); !lr || *lr < 0)
    malformed(path,
              fmt::format("metadata 'lr' is '{}', expected a non-negative number", meta("lr")));
  if (meta("model").empty()) malformed(path, "metadata 'model' is empty");
  if (meta("optimizer") != optimizer.name())
    throw InvalidArgument(fmt::format(
        "{}: the checkpoint was written with optimizer '{}', this run uses '{}'; resume with "
        "the same optimizer",
        path.string(), meta("optimizer"), optimizer.name()));
  // The optimizer's own step counter, when it keeps one, counts the same steps as global_step.
  // (A step that is no count at all is load_state's error.)
  if (auto it = os.values.find("step"); it != os.values.end())
    if (const auto step = detail::parse_integer<std::int64_t>(it->second);
        step && *step != static_cast<std::int64_t>(progress.global_step))
      malformed(path, fmt::format("metadata '{}step' is '{}' but global_step is {}: both count the "
                                  "optimizer's steps",
                                  kOptimizerPrefix, it->second, progress.global_step));

  // Match every parameter before touching the model.
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : c.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0)
      os.tensors.emplace_back(name.substr(kOptimizerPrefix.size()), t);
    else
      by_name[name] = t;
  }
  for (const NamedParameter& p : params) {
    auto it = by_name.find(p.name);
    if (it == by_name.end())
      throw InvalidArgument(
          fmt::format("{}: parameter '{}' is missing; the checkpoint holds another model ({})",
                      path.string(), p.name, meta("model")));
    if (!(it->second.shape() == p.variable->shape()) ||
        it->second.dtype() != p.variable->value().dtype())
      throw InvalidArgument(fmt::format(
          "{}: parameter '{}' is {} {} in the checkpoint, {} {} in the model", path.string(),
          p.name, dtype_name(it->second.dtype()), it->second.shape().str(),
          dtype_name(p.variable->value().dtype()), p.variable->shape().str()));
  }
  if (by_name.size() != params.size())
    for (const auto& [name, t] : by_name)
      if (std::none_of(params.begin(), params.end(),
                       [&, &name = name](const NamedParameter& p) { return p.name == name; }))
        throw InvalidArgument(
            fmt::format("{}: tensor '{}' is not a parameter of the model; the checkpoint holds "
                        "another model ({})",
                        path.string(), name, meta("model")));
  if (meta("model") != model.describe())
    tessera::log().warn(
        "{}: the checkpoint's model description differs from this model's; the "
        "parameters match, resuming",
        path.string());
  try {
    optimizer.load_state(os);  // checks its own entries and changes nothing on error
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path.string(), e.what()));
  }
  for (const NamedParameter& p : params) {
    p.variable->set_value(by_name.at(p.name));
    p.variable->zero_grad();
  }
  return progress;
}

std::string checkpoint_name(int epoch) {
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
