#include "tessera/device.h"

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera {

std::string_view device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::discrete_gpu:
      return "discrete GPU";
    case DeviceType::integrated_gpu:
      return "integrated GPU";
    case DeviceType::virtual_gpu:
      return "virtual GPU";
    case DeviceType::cpu:
      return "CPU";
    case DeviceType::other:
      return "other";
  }
  return "other";
}

Support Kernel::supports(const OpCall& call) const {
  for (int i = 0; i < call.num_inputs; ++i)
    if (call.in(i).dtype() != DType::f32 && call.in(i).dtype() != DType::i32)
      return Support::no(fmt::format("dtype {} is not supported", dtype_name(call.in(i).dtype())));
  return Support::yes();
}

Device::~Device() = default;

Support Device::supports(const OpCall& call) const {
  const Kernel* k = kernel(call.op);
  if (!k) return Support::no("not implemented");
  return k->supports(call);
}

void Device::bind(std::string plugin_name, int index) {
  if (memory_) throw Error(fmt::format("device {} is already bound", id_));
  plugin_ = std::move(plugin_name);
  id_ = fmt::format("{}:{}", plugin_, index);
  memory_ = std::make_unique<CachingAllocator>(allocator(), id_);
}

}  // namespace tessera
