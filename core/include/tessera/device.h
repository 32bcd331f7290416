// Device: one compute device of a plugin (cpu:0, vulkan:1, opencl:0).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/caching_allocator.h"
#include "tessera/kernel.h"
#include "tessera/queue.h"

namespace tessera {

enum class DeviceType { discrete_gpu, integrated_gpu, virtual_gpu, cpu, other };

// "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other".
std::string_view device_type_name(DeviceType type);

// What a device reports about itself. Filled once by the plugin when the device is created.
struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3", "AMD EPYC 7B13"
  DeviceType type = DeviceType::other;
  std::string vendor;  // "NVIDIA", "AuthenticAMD", "Mesa"
  std::string driver;  // driver or library version: "580.65", "OpenBLAS 0.3.21 (SkylakeX)"
  int compute_units = 0;
  // Preference between devices of the same type from different plugins (auto selection): the
  // native CPU plugin scores above a Vulkan or OpenCL implementation that runs on the CPU.
  int score = 0;
  // Features and limits shown by `tessera-devices --verbose`, in display order.
  std::vector<std::pair<std::string, std::string>> properties;
};

// Implemented by plugins. A device lives until the process exits (plugins are never unloaded), so
// raw Device pointers and references stay valid. All methods are thread-safe.
class Device {
 public:
  virtual ~Device();

  virtual const DeviceInfo& info() const = 0;
  // The raw allocator; the core wraps it in memory() and nobody else calls it.
  virtual Allocator& allocator() = 0;
  // The device's queue; every op and copy on this device is ordered on it.
  virtual Queue& queue() = 0;
  // The kernel registered for |op|, or null. The pointer stays valid for the device's life.
  // Called on every dispatch: must be a table lookup, not a search.
  virtual const Kernel* kernel(OpId op) const = 0;

  // Whether this device runs |call| natively: no kernel gives a "not implemented" answer,
  // otherwise the kernel's supports(). Must not throw.
  virtual Support supports(const OpCall& call) const;

  // --- provided by the core ---

  // "cpu:0": the plugin's name and this device's index among its devices. Set once by bind().
  const std::string& id() const { return id_; }
  const std::string& plugin_name() const { return plugin_; }
  // The caching allocator over allocator(); tensors allocate here.
  CachingAllocator& memory() { return *memory_; }
  // Gives the device its id and creates its caching allocator. Called by the runtime when the
  // plugin is loaded (and by tests for hand-made devices); calling it twice throws.
  void bind(std::string plugin_name, int index);

 private:
  std::string id_;
  std::string plugin_;
  std::unique_ptr<CachingAllocator> memory_;
};

}  // namespace tessera
