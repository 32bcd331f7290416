// The strategy registry and the single-process strategy.
#include "tessera/train/strategy.h"

#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/train/trainer.h"

namespace tessera::train {

namespace {

struct Entry {
  StrategyFactory factory;
  std::function<bool()> launched;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, Entry>> entries;  // registration order
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Device& SingleDeviceStrategy::device(const std::string& accelerator, int devices) {
  if (devices > 1)
    throw ConfigError(fmt::format(
        "You requested devices={} with strategy='single_device'; training on several devices is "
        "data-parallel: pass strategy='ddp' (tessera-train --devices {} starts the processes "
        "itself), or devices=1",
        devices, devices));
  return resolve_accelerator(accelerator, devices);
}

void register_strategy(const std::string& name, StrategyFactory factory,
                       std::function<bool()> launched) {
  if (name.empty() || name == "auto" || name == "single_device")
    throw InvalidArgument(
        fmt::format("register_strategy: '{}' is reserved; pick another name", name));
  if (!factory) throw InvalidArgument("register_strategy: the factory is empty");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& [n, e] : r.entries)
    if (n == name) {
      e = Entry{std::move(factory), std::move(launched)};
      return;
    }
  r.entries.emplace_back(name, Entry{std::move(factory), std::move(launched)});
}

std::vector<std::string> registered_strategies() {
  std::vector<std::string> names{"auto", "single_device"};
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [n, e] : r.entries) names.push_back(n);
  return names;
}

std::shared_ptr<Strategy> make_strategy(const std::string& name) {
  if (name == "single_device") return std::make_shared<SingleDeviceStrategy>();
  StrategyFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [n, e] : r.entries)
      if (name == "auto" ? (e.launched && e.launched()) : n == name) {
        factory = e.factory;
        break;
      }
  }
  if (factory) return factory();
  if (name == "auto" || name.empty()) return std::make_shared<SingleDeviceStrategy>();
  std::vector<std::string> quoted;
  for (const std::string& n : registered_strategies()) quoted.push_back("'" + n + "'");
  throw ConfigError(fmt::format(
      "strategy='{}' is not known; the registered strategies are [{}]{}", name,
      fmt::join(quoted, ", "),
      name == "ddp" ? ". 'ddp' comes with tessera::dist: link it (target tessera::dist) and call "
                      "tessera::dist::register_strategies(), or use tessera-train, which has it"
                    : ""));
}

}  // namespace tessera::train
