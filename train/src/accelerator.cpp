// resolve_accelerator: Lightning's accelerator/devices options, with its errors.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

namespace {

// Plugin names with at least one device, and every name a user may pass.
std::vector<std::string> available_accelerators() {
  std::set<std::string> names;
  for (Device* d : devices()) names.insert(d->plugin_name());
  return {names.begin(), names.end()};
}

std::vector<std::string> known_accelerators() {
  std::set<std::string> names{"cpu", "vulkan", "opencl"};
  for (const PluginRecord& r : plugin_records())
    if (!r.name.empty()) names.insert(r.name);
  std::vector<std::string> out{"auto"};
  out.insert(out.end(), names.begin(), names.end());
  return out;
}

std::string quoted_list(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& s : v) q.push_back("'" + s + "'");
  return fmt::format("[{}]", fmt::join(q, ", "));
}

// Why plugin |name| has no device, from the loader's records.
std::string unavailable_reason(const std::string& name) {
  for (const PluginRecord& r : plugin_records())
    if (r.name == name) {
      if (r.outcome == LoadOutcome::loaded)
        return fmt::format("plugin {} loaded from {} but found no device", name, r.path.string());
      return fmt::format("plugin {} from {} did not load: {}", name, r.path.string(), r.reason);
    }
  return fmt::format("no {} plugin was found", name);
}

// Training runs on one device: |devices_wanted| > 1 is refused, naming |chosen|.
void require_one_device(int devices_wanted, const Device& chosen) {
  if (devices_wanted > 1)
    throw ConfigError(fmt::format(
        "You requested devices={}, but training on more than one device is not supported yet; "
        "pass devices=1 (the device picked is {})",
        devices_wanted, chosen.id()));
}

}  // namespace

Device& resolve_accelerator(const std::string& accelerator, int devices_wanted) {
  if (devices_wanted < 1)
    throw ConfigError(
        fmt::format("devices={} is not valid: pass a positive number of devices", devices_wanted));
  if (accelerator.empty() || accelerator == "auto") {
    Device& d = default_device();
    require_one_device(devices_wanted, d);
    return d;
  }
  std::string name = accelerator;
  int index = -1;
  if (auto colon = accelerator.find(':'); colon != std::string::npos) {
    name = accelerator.substr(0, colon);
    try {
      std::size_t used = 0;
      index = std::stoi(accelerator.substr(colon + 1), &used);
      if (used != accelerator.size() - colon - 1 || index < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw ConfigError(fmt::format(
          "You selected an invalid accelerator name: accelerator='{}'. Use a name such as "
          "'vulkan' or one device such as 'vulkan:0'.",
          accelerator));
    }
  }
  const auto known = known_accelerators();
  if (std::find(known.begin(), known.end(), name) == known.end())
    throw ConfigError(
        fmt::format("You selected an invalid accelerator name: accelerator='{}'. Available names "
                    "are: {}.",
                    accelerator, fmt::join(known, ", ")));
  std::vector<Device*> mine;
  for (Device* d : devices())
    if (d->plugin_name() == name) mine.push_back(d);
  if (mine.empty())
    throw DeviceUnavailable(fmt::format(
        "'{}' accelerator can not run on your system since the accelerator is not available "
        "({}). The following accelerator(s) is available and can be passed into the "
        "`accelerator` argument of `Trainer`: {}. Run tessera-devices for details.",
        name, unavailable_reason(name), quoted_list(available_accelerators())));
  if (index >= 0) {
    if (static_cast<std::size_t>(index) >= mine.size()) {
      std::vector<std::string> ids;
      for (Device* d : mine) ids.push_back(d->id());
      throw ConfigError(
          fmt::format("You requested accelerator='{}', but {} has only {} device(s): {}.",
                      accelerator, name, mine.size(), fmt::join(ids, ", ")));
    }
    if (devices_wanted != 1)
      throw ConfigError(
          fmt::format("accelerator='{}' names one device; devices={} can not be more than 1",
                      accelerator, devices_wanted));
    return *mine[static_cast<std::size_t>(index)];
  }
  if (static_cast<std::size_t>(devices_wanted) > mine.size())
    throw ConfigError(
        fmt::format("You requested devices={} with accelerator='{}', but your system only has {} "
                    "{} device(s).",
                    devices_wanted, name, mine.size(), name));
  Device& chosen = *pick_auto(mine, !fallback_chain().empty());
  require_one_device(devices_wanted, chosen);
  return chosen;
}

}  // namespace tessera::train
