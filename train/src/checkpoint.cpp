#include "tessera/train/checkpoint.h"

#include <cmath>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/errors.h"
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
double number(const nlohmann::json& j) {
  return j.is_null() ? std::nan("") : j.get<double>();
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

std::vector<EpochMetrics> parse_history(const std::string& s) {
  std::vector<EpochMetrics> out;
  for (const auto& j : nlohmann::json::parse(s)) {
    EpochMetrics m;
    m.epoch = j.at("epoch").get<int>();
    m.train_loss = number(j.at("train_loss"));
    m.train_accuracy = number(j.at("train_accuracy"));
    m.test_loss = number(j.at("test_loss"));
    m.test_accuracy = number(j.at("test_accuracy"));
    m.seconds = number(j.at("seconds"));
    m.samples_per_second = number(j.at("samples_per_second"));
    out.push_back(m);
  }
  return out;
}

}  // namespace

void save_checkpoint(const fs::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress) {
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
  if (meta("optimizer") != optimizer.name())
    throw InvalidArgument(fmt::format(
        "{}: the checkpoint was written with optimizer '{}', this run uses '{}'; resume with "
        "the same optimizer",
        path.string(), meta("optimizer"), optimizer.name()));

  TrainingProgress progress;
  OptimizerState os;
  try {
    progress.epoch = std::stoi(meta("epoch"));
    progress.global_step = std::stoull(meta("global_step"));
    progress.seed = std::stoull(meta("seed"));
    progress.history = parse_history(meta("history"));
  } catch (const std::exception& e) {
    throw FileError(fmt::format("{}: malformed progress metadata ({})", path.string(), e.what()));
  }
  for (const auto& [k, v] : c.metadata)
    if (k.rfind(kOptimizerPrefix, 0) == 0) os.values[k.substr(kOptimizerPrefix.size())] = v;

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
    throw InvalidArgument(fmt::format("{}: the checkpoint has {} parameters, the model {}",
                                      path.string(), by_name.size(), params.size()));
  optimizer.load_state(os);  // checks its own entries and changes nothing on error
  for (const NamedParameter& p : params) {
    p.variable->set_value(by_name.at(p.name));
    p.variable->zero_grad();
  }
  return progress;
}

std::string checkpoint_name(int epoch) {
  return fmt::format("epoch-{:04}.safetensors", epoch);
}

std::optional<fs::path> latest_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  static const std::regex pattern(R"(epoch-(\d+)\.safetensors)");
  std::optional<fs::path> best;
  long best_epoch = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    const long e = std::stol(m[1].str());
    if (e > best_epoch) {
      best_epoch = e;
      best = entry.path();
    }
  }
  return best;
}

}  // namespace tessera::train
