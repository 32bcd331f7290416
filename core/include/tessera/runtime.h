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
// Throws ConfigError for a malformed spec, and when a variable was found malformed after the
// plugins loaded: a plugin reported one of its own variables malformed (TESSERA_CPU_THREADS=abc,
// LoadStage::config) or TESSERA_FALLBACK names a device no plugin has ever had; the message names
// the variable and what is accepted. Throws DeviceUnavailable (listing the available devices)
// when no device of the spec can run, and for an unknown name lists the known ones.
Device& device(std::string_view spec);

// The device ops run on when the caller names none: the innermost DeviceGuard of this thread,
// else TESSERA_DEVICE, else auto (see choose_auto). Throws ConfigError as device() does, and
// DeviceUnavailable when TESSERA_DEVICE names a device that can not run or there is no device.
Device& default_device();

// Why default_device() is what it is, for tessera-devices: "TESSERA_DEVICE=opencl" or
// "auto: the best of 3 device(s), ... (vulkan:0 is a discrete GPU, score 10, runs every op)".
// Throws as default_device() does.
std::string default_device_reason();

// The number of ops |device| has a kernel for (of kNumOps).
int ops_implemented(const Device& device);

// Whether |device| runs every op without the fallback chain: it has a kernel for every op the core
// does not compose from others (addmm needs none: the core runs matmul then add).
bool runs_every_op(const Device& device);

// What auto picks among |candidates|, and why in words.
struct AutoChoice {
  Device* device = nullptr;  // null when |candidates| is empty
  std::string reason;        // "the best of N device(s), ... (vulkan:0 is a discrete GPU, ...)"
};

// Auto's choice: the best device type (discrete GPU, integrated GPU, virtual GPU, CPU, other),
// then the higher plugin score, the first listed between equals. A device that lacks kernels
// (!runs_every_op) would fail on its first missing op unless fallback is on, so: with
// |fallback| off only devices that implement every op compete (all do when none implements every
// op); with |fallback| on every device competes, and within a type one that implements every op
// wins over one that does not. The reason names partial devices passed over for lack of fallback.
AutoChoice choose_auto(const std::vector<Device*>& candidates, bool fallback);

// choose_auto(candidates, fallback).device.
Device* pick_auto(const std::vector<Device*>& candidates, bool fallback = false);

// A plugin name that has no usable device, and why ("no Vulkan device found (plugin vulkan loaded
// from /usr/lib/tessera/plugins/libtessera-plugin-vulkan.so)").
struct Unavailable {
  std::string name;
  std::string reason;
};

// Resolves |specs| against |candidates| as device() does: the first spec with a device wins; auto
// picks as choose_auto(candidates, fallback). |unavailable| explains names without a device;
// |source| ("TESSERA_DEVICE=vulkan") is quoted in errors. Throws DeviceUnavailable listing
// |candidates|, or naming the known names for a name that is neither a candidate's plugin, nor
// unavailable, nor one of cpu, vulkan, opencl.
Device& resolve_device(const std::vector<DeviceSpec>& specs, const std::vector<Device*>& candidates,
                       const std::vector<Unavailable>& unavailable, std::string_view source,
                       bool fallback = false);

// A plugin of this name was found and loaded.
bool is_built(std::string_view name);
// A plugin of this name has at least one usable device.
bool is_available(std::string_view name);

// Every plugin load attempt, in search order.
std::vector<PluginRecord> plugin_records();

// Makes the runtime probe each plugin in a child process before loading it (LoadOptions::isolate;
// tessera-devices --isolate), so that a plugin that crashes while loading is reported instead of
// killing the process. Only has an effect before the runtime starts (the first call of any other
// function here) and while the process has one thread; returns false when the runtime had
// already started.
bool isolate_plugin_loading();
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
