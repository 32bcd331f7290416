// The process-wide runtime: plugins, devices, device selection and the fallback chain.
//
// It starts on first use (never in a static initialiser): reads the TESSERA_* environment
// (config.h), sets the log level, loads the plugins and logs the effective values at debug level.
// Every function here is thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/config.h"
#include "tessera/device.h"
#include "tessera/dispatch.h"
#include "tessera/loader.h"

namespace tessera {

// Every device of every loaded plugin, in plugin search order.
std::vector<Device*> devices();

// The device |spec| names: "cpu", "vulkan:1", "auto", or a comma list in order of preference.
// Throws ConfigError for a malformed spec, DeviceUnavailable (listing the available devices) when
// no device of the spec can run, and for an unknown name lists the known ones.
Device& device(std::string_view spec);

// The device ops run on when the caller names none: the innermost DeviceGuard of this thread,
// else TESSERA_DEVICE, else auto (discrete GPU, integrated GPU, then CPU; higher plugin score
// between equals). Throws DeviceUnavailable when TESSERA_DEVICE names a device that can not run.
Device& default_device();

// Why default_device() is what it is, for tessera-devices: "TESSERA_DEVICE=opencl" or
// "auto: discrete GPU preferred over CPU".
std::string default_device_reason();

// Picks by preference among |candidates| as auto does; null when empty.
Device* pick_auto(const std::vector<Device*>& candidates);

// A plugin name that has no usable device, and why ("no Vulkan device found (plugin vulkan loaded
// from /usr/lib/tessera/plugins/libtessera-plugin-vulkan.so)").
struct Unavailable {
  std::string name;
  std::string reason;
};

// Resolves |specs| against |candidates| as device() does: the first spec with a device wins.
// |unavailable| explains names without a device; |source| ("TESSERA_DEVICE=vulkan") is quoted in
// errors. Throws DeviceUnavailable listing |candidates|, or naming the known names for a name that
// is neither a candidate's plugin, nor unavailable, nor one of cpu, vulkan, opencl.
Device& resolve_device(const std::vector<DeviceSpec>& specs, const std::vector<Device*>& candidates,
                       const std::vector<Unavailable>& unavailable, std::string_view source);

// A plugin of this name was found and loaded.
bool is_built(std::string_view name);
// A plugin of this name has at least one usable device.
bool is_available(std::string_view name);

// Every plugin load attempt, in search order.
std::vector<PluginRecord> plugin_records();
// The effective configuration read from the environment.
const Config& config();

// The fallback chain in force (TESSERA_FALLBACK unless set_fallback_chain was called).
std::vector<Device*> fallback_chain();
// Replaces the fallback chain for the whole process (an explicit API choice wins over the env).
void set_fallback_chain(std::vector<Device*> chain);
// Counters per fallback route, and their reset.
std::vector<FallbackRoute> fallback_stats();
void reset_fallback_stats();

// The dispatcher every op goes through.
Dispatcher& dispatcher();

// Makes |device| the default device of this thread for its scope, like `with torch.device(...)`.
// Guards nest; each restores the previous default when destroyed.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device& device);
  explicit DeviceGuard(std::string_view spec) : DeviceGuard(tessera::device(spec)) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device* previous_;
};

}  // namespace tessera
