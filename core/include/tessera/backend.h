// Backend: the object a plugin's create function returns; owns that plugin's devices.
#pragma once

#include <string>
#include <vector>

#include "tessera/device.h"

namespace tessera {

// Created once per process by the plugin's entry point (plugin.h) and kept until exit.
// Thread-safe after construction.
class Backend {
 public:
  virtual ~Backend() = default;

  // The devices of this backend in a stable order (index N becomes "NAME:N"). May be empty: the
  // runtime then reports the plugin with status() as the reason. Owned by the backend.
  virtual std::vector<Device*> devices() = 0;

  // Why the backend has no usable device ("no Vulkan device found", "no OpenCL platform"), or a
  // short note about what it found; empty when there is nothing to say.
  virtual std::string status() const { return {}; }
};

}  // namespace tessera
