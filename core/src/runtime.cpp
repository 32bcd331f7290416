#include "tessera/runtime.h"

#include <algorithm>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/log.h"

namespace tessera {
namespace {

constexpr std::string_view kWellKnown[] = {"cpu", "vulkan", "opencl"};

struct State {
  Config config;
  std::exception_ptr config_error;  // a malformed TESSERA_* variable, rethrown by every call
  LoadResult loaded;
  std::vector<Device*> devices;
  std::vector<std::filesystem::path> searched;
  Dispatcher dispatcher;

  std::once_flag default_once;
  Device* env_default = nullptr;
  std::exception_ptr default_error;
  std::string default_reason;
};

thread_local Device* t_guard = nullptr;

int type_rank(DeviceType t) {
  switch (t) {
    case DeviceType::discrete_gpu:
      return 0;
    case DeviceType::integrated_gpu:
      return 1;
    case DeviceType::virtual_gpu:
      return 2;
    case DeviceType::cpu:
      return 3;
    case DeviceType::other:
      return 4;
  }
  return 5;
}

std::vector<Unavailable> unavailable_names(const State& s) {
  std::vector<Unavailable> out;
  auto has_device = [&](const std::string& name) {
    return std::any_of(s.devices.begin(), s.devices.end(),
                       [&](Device* d) { return d->plugin_name() == name; });
  };
  for (const PluginRecord& r : s.loaded.records) {
    if (has_device(r.name) || r.outcome == LoadOutcome::shadowed) continue;
    if (std::any_of(out.begin(), out.end(), [&](const Unavailable& u) { return u.name == r.name; }))
      continue;
    std::string why;
    switch (r.outcome) {
      case LoadOutcome::loaded:
        why = fmt::format("{} (plugin {} loaded from {})", r.reason, r.name, r.path.string());
        break;
      case LoadOutcome::disabled:
        why = fmt::format("plugin {} is disabled by TESSERA_DISABLE_PLUGINS", r.name);
        break;
      default:
        why =
            fmt::format("plugin {} failed to load from {}: {}", r.name, r.path.string(), r.reason);
    }
    out.push_back({r.name, why});
  }
  std::vector<std::string> dirs;
  for (const auto& d : s.searched) dirs.push_back(d.string());
  for (std::string_view name : kWellKnown)
    if (!has_device(std::string(name)) &&
        std::none_of(out.begin(), out.end(), [&](const Unavailable& u) { return u.name == name; }))
      out.push_back(
          {std::string(name),
           fmt::format("no plugin named '{}' was found (searched: {})", name,
                       dirs.empty() ? "nothing" : fmt::format("{}", fmt::join(dirs, ", ")))});
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string device_list(const std::vector<Device*>& devices) {
  std::vector<std::string> ids;
  for (Device* d : devices) ids.push_back(d->id());
  return ids.empty() ? "none" : fmt::format("{}", fmt::join(ids, ", "));
}

State* init() {
  auto* s = new State();  // never destroyed: plugins stay loaded until the process exits
  try {
    s->config = Config::from_env();
  } catch (const ConfigError&) {
    s->config_error = std::current_exception();
    return s;
  }
  log().set_level(static_cast<spdlog::level::level_enum>(s->config.log_level));
  s->searched = s->config.plugin_path;
  for (auto& d : builtin_plugin_dirs()) s->searched.push_back(d);
  log().debug("TESSERA_DEVICE={} TESSERA_FALLBACK={} TESSERA_CACHE_DIR={}",
              s->config.device.empty() ? "auto" : s->config.device,
              s->config.fallback.empty() ? "0" : [&] {
                std::vector<std::string> v;
                for (auto& f : s->config.fallback) v.push_back(f.str());
                return fmt::format("{}", fmt::join(v, ","));
              }(),
              s->config.cache_dir.string());
  s->loaded = load_plugins(s->searched, s->config.disabled_plugins);
  for (const LoadedPlugin& p : s->loaded.plugins)
    for (Device* d : p.backend->devices()) s->devices.push_back(d);
  log().debug("devices: {}", device_list(s->devices));

  std::vector<Device*> chain;
  const auto unavailable = unavailable_names(*s);
  for (const DeviceSpec& spec : s->config.fallback) {
    try {
      chain.push_back(&resolve_device({spec}, s->devices, unavailable, "TESSERA_FALLBACK"));
    } catch (const DeviceUnavailable& e) {
      log().warn("TESSERA_FALLBACK: skipping '{}': {}", spec.str(), e.what());
    }
  }
  s->dispatcher.set_chain(std::move(chain));
  return s;
}

State& raw_state() {
  static State* s = init();
  return *s;
}

State& state() {
  State& s = raw_state();
  if (s.config_error) std::rethrow_exception(s.config_error);
  return s;
}

}  // namespace

std::vector<Device*> devices() {
  return state().devices;
}

Device* pick_auto(const std::vector<Device*>& candidates) {
  Device* best = nullptr;
  for (Device* d : candidates) {
    if (!best) {
      best = d;
      continue;
    }
    const int rd = type_rank(d->info().type), rb = type_rank(best->info().type);
    if (rd < rb || (rd == rb && d->info().score > best->info().score)) best = d;
  }
  return best;
}

Device& resolve_device(const std::vector<DeviceSpec>& specs, const std::vector<Device*>& candidates,
                       const std::vector<Unavailable>& unavailable, std::string_view source) {
  std::vector<std::string> reasons;
  for (const DeviceSpec& spec : specs) {
    if (spec.is_auto()) {
      if (Device* d = pick_auto(candidates)) return *d;
      reasons.push_back("no device was found");
      continue;
    }
    std::vector<Device*> matching;
    for (Device* d : candidates)
      if (d->plugin_name() == spec.name) matching.push_back(d);
    if (!matching.empty()) {
      const int index = spec.index.value_or(0);
      if (index < static_cast<int>(matching.size()))
        return *matching[static_cast<std::size_t>(index)];
      reasons.push_back(fmt::format("{} has {} device(s): {}", spec.name, matching.size(),
                                    device_list(matching)));
      continue;
    }
    auto u = std::find_if(unavailable.begin(), unavailable.end(),
                          [&](const Unavailable& x) { return x.name == spec.name; });
    if (u != unavailable.end()) {
      reasons.push_back(u->reason);
      continue;
    }
    std::vector<std::string> known{"auto"};
    for (Device* d : candidates)
      if (std::find(known.begin(), known.end(), d->plugin_name()) == known.end())
        known.push_back(d->plugin_name());
    for (const Unavailable& x : unavailable)
      if (std::find(known.begin(), known.end(), x.name) == known.end()) known.push_back(x.name);
    std::string hint;
    for (const std::string& k : known)
      if (edit_distance(k, spec.name) <= 2) hint = fmt::format(" Did you mean '{}'?", k);
    throw DeviceUnavailable(fmt::format(
        "DeviceUnavailable: unknown device '{}' ({}).{} Known devices: {}. Available: {}. Run "
        "tessera-devices for details.",
        spec.name, source, hint, fmt::join(known, ", "), device_list(candidates)));
  }
  std::vector<std::string> asked;
  for (const DeviceSpec& s : specs) asked.push_back(s.str());
  throw DeviceUnavailable(fmt::format(
      "DeviceUnavailable: '{}' was requested ({}) but can not run on this system: {}. "
      "Available: {}. Run tessera-devices for details.",
      fmt::join(asked, ","), source, fmt::join(reasons, "; "), device_list(candidates)));
}

Device& device(std::string_view spec) {
  State& s = state();
  return resolve_device(parse_device_list(spec, "device"), s.devices, unavailable_names(s),
                        fmt::format("device(\"{}\")", spec));
}

namespace {
void resolve_env_default(State& s) {
  std::call_once(s.default_once, [&] {
    try {
      const bool from_env = !s.config.device.empty();
      const std::string source = from_env ? fmt::format("TESSERA_DEVICE={}", s.config.device)
                                          : std::string("default: auto");
      const auto specs = parse_device_list(s.config.device);
      s.env_default = &resolve_device(specs, s.devices, unavailable_names(s), source);
      if (specs.size() == 1 && specs[0].is_auto())
        s.default_reason = fmt::format(
            "{}: the best of {} device(s), preferring a discrete GPU, then an integrated GPU, then "
            "the CPU ({} is a {}, score {})",
            from_env ? source : "auto", s.devices.size(), s.env_default->id(),
            device_type_name(s.env_default->info().type), s.env_default->info().score);
      else
        s.default_reason = source;
      log().debug("default device: {} ({})", s.env_default->id(), s.default_reason);
    } catch (...) {
      s.default_error = std::current_exception();
    }
  });
  if (s.default_error) std::rethrow_exception(s.default_error);
}
}  // namespace

Device& default_device() {
  if (t_guard) return *t_guard;
  State& s = state();
  if (!s.env_default) resolve_env_default(s);
  return *s.env_default;
}

std::string default_device_reason() {
  if (t_guard) return fmt::format("DeviceGuard({})", t_guard->id());
  State& s = state();
  resolve_env_default(s);
  return s.default_reason;
}

bool is_built(std::string_view name) {
  const State& s = state();
  return std::any_of(s.loaded.plugins.begin(), s.loaded.plugins.end(),
                     [&](const LoadedPlugin& p) { return p.name == name; });
}

bool is_available(std::string_view name) {
  const State& s = state();
  return std::any_of(s.devices.begin(), s.devices.end(),
                     [&](Device* d) { return d->plugin_name() == name; });
}

std::vector<PluginRecord> plugin_records() {
  return state().loaded.records;
}
const Config& config() {
  return state().config;
}
std::vector<Device*> fallback_chain() {
  return state().dispatcher.chain();
}
void set_fallback_chain(std::vector<Device*> chain) {
  state().dispatcher.set_chain(std::move(chain));
}
std::vector<FallbackRoute> fallback_stats() {
  return state().dispatcher.routes();
}
void reset_fallback_stats() {
  state().dispatcher.reset_stats();
}
Dispatcher& dispatcher() {
  return state().dispatcher;
}

DeviceGuard::DeviceGuard(Device& device) : previous_(t_guard) {
  t_guard = &device;
}
DeviceGuard::~DeviceGuard() {
  t_guard = previous_;
}

}  // namespace tessera
