// Entry point of the CPU plugin: one device, cpu:0, that implements every op.
#include <memory>

#include "device.h"
#include "tessera/plugin.h"

namespace tessera::cpu {
namespace {

class CpuBackend final : public Backend {
 public:
  std::vector<Device*> devices() override { return {&device_}; }

 private:
  CpuDevice device_;
};

std::unique_ptr<Backend> create_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace
}  // namespace tessera::cpu

TESSERA_DEFINE_PLUGIN("cpu", "0.1.0", tessera::cpu::create_backend)
