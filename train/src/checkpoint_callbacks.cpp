// ModelCheckpoint and EarlyStopping (callbacks.h).
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "callback_files.h"
#include "parse.h"
#include "tessera/errors.h"
#include "tessera/log.h"
#include "tessera/train/callbacks.h"
#include "tessera/train/serialize.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDefaultFilename = "epoch-{epoch:04}";
constexpr const char* kSuffix = ".safetensors";

void require_mode(const std::string& who, const std::string& mode) {
  if (mode != "min" && mode != "max")
    throw ConfigError(fmt::format("{}: mode='{}' is not valid: pass 'min' or 'max'", who, mode));
}

// The placeholders of |pattern|: {name} or {name:spec}. ConfigError for unbalanced braces.
struct Field {
  std::size_t begin, end;  // of "{...}" in the pattern
  std::string name, spec;
};
std::vector<Field> fields_of(const std::string& pattern) {
  std::vector<Field> out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '}')
      throw ConfigError(
          fmt::format("ModelCheckpoint: filename '{}' has a '}}' without '{{'", pattern));
    if (pattern[i] != '{') continue;
    const std::size_t close = pattern.find('}', i);
    if (close == std::string::npos || pattern.find('{', i + 1) < close)
      throw ConfigError(
          fmt::format("ModelCheckpoint: filename '{}' has a '{{' without '}}'", pattern));
    const std::string inner = pattern.substr(i + 1, close - i - 1);
    const std::size_t colon = inner.find(':');
    Field f{i, close + 1, inner.substr(0, colon),
            colon == std::string::npos ? std::string() : inner.substr(colon + 1)};
    if (f.name.empty())
      throw ConfigError(
          fmt::format("ModelCheckpoint: filename '{}' has an empty placeholder {{}}", pattern));
    out.push_back(std::move(f));
    i = close;
  }
  return out;
}

std::string number_json(double v) {
  return std::isfinite(v) ? nlohmann::json(v).dump() : "null";
}

[[noreturn]] void bad_state(const std::string& key, const std::string& what) {
  throw InvalidArgument(fmt::format("state '{}': {}", key, what));
}

const std::string& state_at(const std::map<std::string, std::string>& s, const std::string& key) {
  auto it = s.find(key);
  if (it == s.end()) bad_state(key, "missing");
  return it->second;
}

double number_of(const std::map<std::string, std::string>& s, const std::string& key) {
  const std::string& v = state_at(s, key);
  if (v == "null") return std::nan("");
  const auto d = detail::parse_number(v);
  if (!d || !std::isfinite(*d)) bad_state(key, fmt::format("'{}' is not a number or null", v));
  return *d;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : options_(std::move(options)), best_score_(std::nan("")) {
  require_mode("ModelCheckpoint", options_.mode);
  if (options_.save_top_k < -1)
    throw ConfigError(
        fmt::format("ModelCheckpoint: save_top_k={} is not valid: pass -1 (keep all), 0 or more",
                    options_.save_top_k));
  if (options_.filename.empty())
    throw ConfigError(
        "ModelCheckpoint: filename is empty; pass a pattern such as "
        "\"epoch-{epoch:04}\"");
  fields_of(options_.filename);
  if (!options_.best_weights.empty() && options_.monitor.empty())
    throw ConfigError(
        "ModelCheckpoint: best_weights needs monitor: the best model is the one "
        "with the best value of the monitored metric");
  if (!options_.dirpath.empty())
    detail::require_writable_dir(options_.dirpath, "checkpoint directory");
}

namespace {
ModelCheckpointOptions every_epoch(fs::path dir) {
  ModelCheckpointOptions o;
  o.dirpath = std::move(dir);
  o.save_top_k = -1;
  return o;
}
}  // namespace

ModelCheckpoint::ModelCheckpoint(fs::path dir) : ModelCheckpoint(every_epoch(std::move(dir))) {}

std::string ModelCheckpoint::state_key() const {
  return fmt::format("ModelCheckpoint{{monitor={},mode={},filename={}}}", options_.monitor,
                     options_.mode, options_.filename);
}

bool ModelCheckpoint::better(double a, double b) const {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return options_.mode == "min" ? a < b : a > b;
}

void ModelCheckpoint::on_fit_start(Trainer& t) {
  if (options_.dirpath.empty()) {
    const fs::path root =
        t.options().default_root_dir.empty() ? fs::path(".") : t.options().default_root_dir;
    options_.dirpath = root / "checkpoints";
    if (t.is_global_zero()) detail::require_writable_dir(options_.dirpath, "checkpoint directory");
  }
  if (!t.resumed() || options_.filename != kDefaultFilename) return;
  // The one name this fit could write that is the checkpoint it resumed from is that file's own
  // name, when it is epoch-N.safetensors for an epoch N this fit will train.
  const fs::path& from = t.resumed_from();
  const std::string name = from.filename().string();
  const std::optional<std::string_view> digits = checkpoint_name_digits(name);
  if (!digits) return;
  const auto n = detail::parse_integer<std::int64_t>(*digits);
  const std::int64_t max = t.options().max_epochs;
  if (!n || checkpoint_name(*n) != name || *n <= t.progress().epoch || (max >= 0 && *n > max) ||
      !detail::same_file(options_.dirpath / name, from))
    return;
  throw FileError(fmt::format(
      "{}: this run resumes from it, but it holds epoch {} while its name says epoch {}; "
      "training on would write epoch {}'s checkpoint over it. Rename the file to {}, or write "
      "checkpoints to another directory",
      from.string(), t.progress().epoch, *n, *n, checkpoint_name(t.progress().epoch)));
}

void ModelCheckpoint::on_validation_end(Trainer& t) {
  save(t);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& t) {
  if (!t.has_validation()) save(t);
}

void ModelCheckpoint::save(Trainer& t) {
  const double score =
      options_.monitor.empty() ? std::nan("") : t.monitored(options_.monitor, "ModelCheckpoint");
  const TrainingProgress& p = t.progress();
  std::string name;
  std::size_t at = 0;
  for (const Field& f : fields_of(options_.filename)) {
    name += options_.filename.substr(at, f.begin - at);
    at = f.end;
    const std::string spec = "{:" + f.spec + "}";
    try {
      if (f.name == "epoch")
        name += fmt::format(fmt::runtime(spec), p.epoch_batch > 0 ? p.epoch + 1 : p.epoch);
      else if (f.name == "step")
        name += fmt::format(fmt::runtime(spec), p.global_step);
      else
        name += fmt::format(fmt::runtime(spec), t.monitored(f.name, "ModelCheckpoint filename"));
    } catch (const fmt::format_error& e) {
      throw ConfigError(fmt::format("ModelCheckpoint: filename '{}': placeholder {{{}}}: {}",
                                    options_.filename, f.name, e.what()));
    }
  }
  name += options_.filename.substr(at) + kSuffix;
  const fs::path path = options_.dirpath / name;
  if (t.resumed() && detail::same_file(path, t.resumed_from()))
    throw FileError(fmt::format(
        "{}: not writing the checkpoint of step {} over the checkpoint this run resumed from",
        path.string(), p.global_step));

  std::vector<fs::path> evicted;
  bool keep = options_.save_top_k != 0;
  if (keep && options_.save_top_k > 0 && !best_k_.count(path) &&
      static_cast<int>(best_k_.size()) >= options_.save_top_k && !options_.monitor.empty()) {
    // Full: the new one must beat the worst kept.
    fs::path worst = order_.front();
    for (const fs::path& f : order_)
      if (better(best_k_.at(worst), best_k_.at(f))) worst = f;
    keep = better(score, best_k_.at(worst));
  }
  if (keep) {
    if (!best_k_.count(path)) order_.push_back(path);
    best_k_[path] = score;
    while (options_.save_top_k > 0 && static_cast<int>(best_k_.size()) > options_.save_top_k) {
      fs::path drop = order_.front();  // without monitor: the oldest
      if (!options_.monitor.empty())
        for (const fs::path& f : order_)
          if (f != path && (drop == path || better(best_k_.at(drop), best_k_.at(f)))) drop = f;
      best_k_.erase(drop);
      order_.erase(std::find(order_.begin(), order_.end(), drop));
      evicted.push_back(drop);
    }
  }
  const bool new_best = keep && !options_.monitor.empty() &&
                        (best_path_.empty() || path == best_path_ || better(score, best_score_));
  if (new_best) {
    best_path_ = path;
    best_score_ = score;
  }
  if (keep) {
    last_path_ = path;
    t.save_checkpoint(path);
  }
  if (options_.save_last) t.save_checkpoint(options_.dirpath / (std::string("last") + kSuffix));
  if (!t.is_global_zero()) return;  // the others keep the same record; rank zero writes
  for (const fs::path& f : evicted) {
    std::error_code ec;
    if (!(t.resumed() && detail::same_file(f, t.resumed_from()))) fs::remove(f, ec);
  }
  if (new_best && !options_.best_weights.empty())
    train::save(t.module(), options_.dirpath / options_.best_weights);
}

std::map<std::string, std::string> ModelCheckpoint::state_dict() const {
  nlohmann::json kept = nlohmann::json::array();
  for (const fs::path& f : order_)
    kept.push_back({f.string(), nlohmann::json::parse(number_json(best_k_.at(f)))});
  return {{"best_k_models", kept.dump()},
          {"best_model_path", best_path_.string()},
          {"best_model_score", number_json(best_score_)},
          {"last_model_path", last_path_.string()}};
}

void ModelCheckpoint::load_state_dict(const std::map<std::string, std::string>& state) {
  for (const auto& [k, v] : state)
    if (k != "best_k_models" && k != "best_model_path" && k != "best_model_score" &&
        k != "last_model_path")
      bad_state(k, "is not part of ModelCheckpoint's state");
  nlohmann::json kept;
  try {
    kept = nlohmann::json::parse(state_at(state, "best_k_models"));
  } catch (const nlohmann::json::exception&) {
    bad_state("best_k_models", "is not JSON");
  }
  std::map<fs::path, double> best;
  std::vector<fs::path> order;
  if (!kept.is_array()) bad_state("best_k_models", "is not a JSON array");
  for (const auto& e : kept) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || e[0].get<std::string>().empty() ||
        !(e[1].is_null() || e[1].is_number()))
      bad_state("best_k_models", "an entry is not [path, score or null]");
    const fs::path f = e[0].get<std::string>();
    if (!best.emplace(f, e[1].is_null() ? std::nan("") : e[1].get<double>()).second)
      bad_state("best_k_models", fmt::format("'{}' is listed twice", f.string()));
    order.push_back(f);
  }
  const double score = number_of(state, "best_model_score");
  best_k_ = std::move(best);
  order_ = std::move(order);
  best_path_ = state_at(state, "best_model_path");
  best_score_ = score;
  last_path_ = state_at(state, "last_model_path");
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)), best_(std::nan("")) {
  if (options_.monitor.empty())
    throw ConfigError("EarlyStopping: monitor is empty; name the logged metric to watch");
  require_mode("EarlyStopping", options_.mode);
  if (options_.patience < 0)
    throw ConfigError(
        fmt::format("EarlyStopping: patience={} is not valid: pass 0 or more", options_.patience));
  if (!(options_.min_delta >= 0) || !std::isfinite(options_.min_delta))
    throw ConfigError(fmt::format("EarlyStopping: min_delta={} is not valid: pass 0 or more",
                                  options_.min_delta));
}

std::string EarlyStopping::state_key() const {
  return fmt::format("EarlyStopping{{monitor={},mode={}}}", options_.monitor, options_.mode);
}

void EarlyStopping::on_validation_end(Trainer& t) {
  check(t);
}

void EarlyStopping::on_train_epoch_end(Trainer& t) {
  if (!t.has_validation()) check(t);
}

void EarlyStopping::check(Trainer& t) {
  const double v = t.monitored(options_.monitor, "EarlyStopping");
  bool stop = false;
  if (options_.check_finite && !std::isfinite(v)) {
    stop = true;
    tessera::log().info("EarlyStopping: {} = {} is not finite; stopping", options_.monitor, v);
  } else {
    const double delta = options_.mode == "min" ? -options_.min_delta : options_.min_delta;
    const bool improved =
        std::isnan(best_) || (options_.mode == "min" ? v < best_ + delta : v > best_ + delta);
    if (improved) {
      best_ = v;
      wait_ = 0;
    } else if (++wait_ >= options_.patience) {
      stop = true;
      tessera::log().info("EarlyStopping: {} did not improve in the last {} checks (best {})",
                          options_.monitor, wait_, best_);
    }
  }
  if (stop) {
    t.should_stop = true;
    const TrainingProgress& p = t.progress();
    stopped_epoch_ = p.epoch_batch > 0 ? p.epoch + 1 : p.epoch;
  }
}

std::map<std::string, std::string> EarlyStopping::state_dict() const {
  return {{"wait_count", std::to_string(wait_)},
          {"best_score", number_json(best_)},
          {"stopped_epoch", std::to_string(stopped_epoch_)}};
}

void EarlyStopping::load_state_dict(const std::map<std::string, std::string>& state) {
  for (const auto& [k, v] : state)
    if (k != "wait_count" && k != "best_score" && k != "stopped_epoch")
      bad_state(k, "is not part of EarlyStopping's state");
  const auto wait = detail::parse_integer<int>(state_at(state, "wait_count"));
  if (!wait || *wait < 0)
    bad_state("wait_count", fmt::format("'{}' is not a count", state_at(state, "wait_count")));
  const auto stopped = detail::parse_integer<std::int64_t>(state_at(state, "stopped_epoch"));
  if (!stopped || *stopped < 0)
    bad_state("stopped_epoch",
              fmt::format("'{}' is not an epoch", state_at(state, "stopped_epoch")));
  const double best = number_of(state, "best_score");
  wait_ = *wait;
  best_ = best;
  stopped_epoch_ = *stopped;
}

}  // namespace tessera::train
