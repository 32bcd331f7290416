// Device buffer limits shared by the GPU plugins: the largest buffer a kernel can bind
// (Vulkan's maxStorageBufferRange / maxMemoryAllocationSize, OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE)
// is a limit, not a lack of memory. Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "tessera/caching_allocator.h"
#include "tessera/errors.h"
#include "tessera/kernel.h"

namespace tessera::common {

// The bytes a buffer holding |t|'s view needs, as the caching allocator would round them (a
// broadcast view needs only the elements it reaches, not numel of its shape).
inline std::size_t buffer_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) last += (t.shape()[i] - 1) * t.strides()[i];
  return CachingAllocator::round_size(static_cast<std::size_t>(last + 1) * dtype_size(t.dtype()));
}

// No when a tensor of |call| needs a buffer over |max_bytes| (the device could not bind it), naming
// the limit; yes otherwise. Called from a device's supports(), so the fallback chain can take the
// call as it takes any other call the device declines.
inline Support within_buffer_limit(const OpCall& call, std::size_t max_bytes,
                                   std::string_view limit) {
  auto check = [&](const Tensor& t) -> Support {
    const std::size_t bytes = buffer_bytes(t);
    if (bytes <= max_bytes) return Support::yes();
    return Support::no(
        fmt::format("a {} tensor is larger than the device's largest buffer, {} ({})",
                    format_bytes(bytes), format_bytes(max_bytes), limit));
  };
  for (int i = 0; i < call.num_inputs; ++i)
    if (Support s = check(call.in(i)); !s) return s;
  for (int i = 0; i < call.num_outputs; ++i)
    if (Support s = check(call.out(i)); !s) return s;
  return Support::yes();
}

// The error for a buffer of |bytes| over |max_bytes|: "vulkan:0 (llvmpipe) can not hold a 2.0 GiB
// buffer: its largest storage buffer is 128 MiB (maxStorageBufferRange). ...".
inline InvalidArgument buffer_limit_error(std::string_view device, std::string_view name,
                                          std::size_t bytes, std::size_t max_bytes,
                                          std::string_view limit) {
  return InvalidArgument(fmt::format(
      "{} ({}) can not hold a {} buffer: its largest storage buffer is {} ({}). This is a limit of "
      "the device, not a lack of memory: use smaller tensors (a smaller batch), or another device "
      "(TESSERA_DEVICE=cpu); an op on a tensor from another device that would need such a buffer "
      "here goes to the fallback chain (TESSERA_FALLBACK=1)",
      device, name, format_bytes(bytes), format_bytes(max_bytes), limit));
}

}  // namespace tessera::common
