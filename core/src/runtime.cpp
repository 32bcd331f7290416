#include "tessera/runtime.h"

#include <algorithm>
#include <atomic>
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
  // A malformed variable found once the plugins were loaded (a plugin's own variable, an unknown
  // TESSERA_FALLBACK name): rethrown by the calls that choose a device.
  std::exception_ptr selection_error;
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
std::atomic<bool> g_isolate{false};
std::atomic<bool> g_started{false};

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

// The names a spec may use: the plugins with a device, those that failed or have none, and the
// well-known ones; "auto" first when |with_auto|.
std::vector<std::string> known_names(const std::vector<Device*>& candidates,
                                     const std::vector<Unavailable>& unavailable, bool with_auto) {
  std::vector<std::string> known;
  if (with_auto) known.emplace_back("auto");
  for (Device* d : candidates)
    if (std::find(known.begin(), known.end(), d->plugin_name()) == known.end())
      known.push_back(d->plugin_name());
  for (const Unavailable& x : unavailable)
    if (std::find(known.begin(), known.end(), x.name) == known.end()) known.push_back(x.name);
  return known;
}

bool known_name(std::string_view name, const std::vector<Device*>& candidates,
                const std::vector<Unavailable>& unavailable) {
  const auto known = known_names(candidates, unavailable, false);
  return std::find(known.begin(), known.end(), name) != known.end();
}

// " Did you mean 'vulkan'?" for a name close to a known one, else "".
std::string suggestion(std::string_view name, const std::vector<Device*>& candidates,
                       const std::vector<Unavailable>& unavailable, bool with_auto) {
  std::string hint;
  for (const std::string& k : known_names(candidates, unavailable, with_auto))
    if (edit_distance(k, name) <= 2) hint = fmt::format(" Did you mean '{}'?", k);
  return hint;
}

std::string device_list(const std::vector<Device*>& devices) {
  std::vector<std::string> ids;
  for (Device* d : devices) ids.push_back(d->id());
  return ids.empty() ? "none" : fmt::format("{}", fmt::join(ids, ", "));
}

State* init() {
  g_started = true;
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
  s->loaded = load_plugins(s->searched, s->config.disabled_plugins, {.isolate = g_isolate.load()});
  for (const LoadedPlugin& p : s->loaded.plugins)
    for (Device* d : p.backend->devices()) s->devices.push_back(d);
  log().debug("devices: {}", device_list(s->devices));

  std::vector<std::string> malformed;
  for (const PluginRecord& r : s->loaded.records)
    if (r.outcome == LoadOutcome::failed && r.stage == LoadStage::config)
      malformed.push_back(fmt::format("{} (plugin {} from {})", r.reason, r.name, r.path.string()));
  std::vector<Device*> chain;
  const auto unavailable = unavailable_names(*s);
  for (const DeviceSpec& spec : s->config.fallback) {
    if (!known_name(spec.name, s->devices, unavailable)) {
      malformed.push_back(fmt::format(
          "TESSERA_FALLBACK='{}' is not valid: '{}' is not a device Tessera knows.{} Known: {}. "
          "Use 0, 1 (the CPU), or a comma list of devices to try in order (opencl,cpu).",
          s->config.fallback_value, spec.name,
          suggestion(spec.name, s->devices, unavailable, false),
          fmt::join(known_names(s->devices, unavailable, false), ", ")));
      continue;
    }
    try {
      chain.push_back(&resolve_device({spec}, s->devices, unavailable, "TESSERA_FALLBACK"));
    } catch (const DeviceUnavailable& e) {
      log().warn("TESSERA_FALLBACK: skipping '{}': {}", spec.str(), e.what());
    }
  }
  s->dispatcher.set_chain(std::move(chain));
  if (!malformed.empty())
    s->selection_error = std::make_exception_ptr(ConfigError(
        fmt::format("ConfigError: {}\nNo device is chosen while a variable is malformed: fix or "
                    "unset it.",
                    fmt::join(malformed, "\n"))));
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

int ops_implemented(const Device& device) {
  int n = 0;
  for (int op = 0; op < kNumOps; ++op) n += device.kernel(static_cast<OpId>(op)) != nullptr;
  return n;
}

bool runs_every_op(const Device& device) {
  // addmm needs no kernel: ops.cpp runs matmul then add on the device when it has none.
  for (int op = 0; op < kNumOps; ++op)
    if (static_cast<OpId>(op) != OpId::addmm && !device.kernel(static_cast<OpId>(op))) return false;
  return true;
}

AutoChoice choose_auto(const std::vector<Device*>& candidates, bool fallback) {
  auto complete = [](const Device* d) { return runs_every_op(*d); };
  // Better type first; with fallback on, a complete device before a partial one of the same type;
  // then the higher score; the first listed between equals.
  auto better = [&](const Device* a, const Device* b) {
    const int ra = type_rank(a->info().type), rb = type_rank(b->info().type);
    if (ra != rb) return ra < rb;
    if (fallback && complete(a) != complete(b)) return complete(a);
    return a->info().score > b->info().score;
  };
  const bool any_complete = std::any_of(candidates.begin(), candidates.end(), complete);
  AutoChoice c;
  for (Device* d : candidates) {
    // Without fallback a partial device would fail on its first missing op: only complete ones
    // compete, unless there is none.
    if (!fallback && any_complete && !complete(d)) continue;
    if (!c.device || better(d, c.device)) c.device = d;
  }
  if (!c.device) return c;
  const DeviceInfo& info = c.device->info();
  c.reason = fmt::format(
      "the best of {} device(s), preferring a discrete GPU, then an integrated GPU, then the CPU "
      "({} is a {}, score {}",
      candidates.size(), c.device->id(), device_type_name(info.type), info.score);
  if (complete(c.device)) {
    c.reason += ", runs every op)";
  } else {
    c.reason += fmt::format(
        ", {} of {} ops{})", ops_implemented(*c.device), kNumOps,
        fallback ? "; the others run on the fallback chain" : "; no device implements every op");
  }
  std::vector<std::string> skipped;
  for (Device* d : candidates) {
    if (d == c.device || complete(d)) continue;
    const int rd = type_rank(d->info().type), rc = type_rank(info.type);
    if (rd < rc || (rd == rc && d->info().score > info.score))
      skipped.push_back(fmt::format("{} ({}, {} of {} ops)", d->id(),
                                    device_type_name(d->info().type), ops_implemented(*d),
                                    kNumOps));
  }
  if (!skipped.empty())
    c.reason += fmt::format(
        "; passed over {} because fallback is off (TESSERA_FALLBACK=1 would choose it and run the "
        "ops it lacks on the CPU)",
        fmt::join(skipped, ", "));
  return c;
}

Device* pick_auto(const std::vector<Device*>& candidates, bool fallback) {
  return choose_auto(candidates, fallback).device;
}

Device& resolve_device(const std::vector<DeviceSpec>& specs, const std::vector<Device*>& candidates,
                       const std::vector<Unavailable>& unavailable, std::string_view source,
                       bool fallback) {
  std::vector<std::string> reasons;
  for (const DeviceSpec& spec : specs) {
    if (spec.is_auto()) {
      if (Device* d = pick_auto(candidates, fallback)) return *d;
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
    const std::vector<std::string> known = known_names(candidates, unavailable, true);
    const std::string hint = suggestion(spec.name, candidates, unavailable, true);
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
  if (s.selection_error) std::rethrow_exception(s.selection_error);
  return resolve_device(parse_device_list(spec, "device"), s.devices, unavailable_names(s),
                        fmt::format("device(\"{}\")", spec), !s.dispatcher.chain().empty());
}

namespace {
void resolve_env_default(State& s) {
  std::call_once(s.default_once, [&] {
    try {
      if (s.selection_error) std::rethrow_exception(s.selection_error);
      const bool from_env = !s.config.device.empty();
      const std::string source = from_env ? fmt::format("TESSERA_DEVICE={}", s.config.device)
                                          : std::string("default: auto");
      const auto specs = parse_device_list(s.config.device);
      const bool fallback = !s.dispatcher.chain().empty();
      s.env_default = &resolve_device(specs, s.devices, unavailable_names(s), source, fallback);
      if (specs.size() == 1 && specs[0].is_auto())
        s.default_reason = fmt::format("{}: {}", from_env ? source : "auto",
                                       choose_auto(s.devices, fallback).reason);
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

bool isolate_plugin_loading() {
  if (g_started.load()) return false;
  g_isolate = true;
  return true;
}

DeviceGuard::DeviceGuard(Device& device) : previous_(t_guard) {
  t_guard = &device;
}
DeviceGuard::~DeviceGuard() {
  t_guard = previous_;
}

}  // namespace tessera
