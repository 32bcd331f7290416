// Which queue family of a Vulkan device the plugin records its work on.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <span>

namespace tessera::vulkan {

// The first family with compute and without graphics (a dedicated compute family, as ggml's Vulkan
// backend takes too), else the first with compute; families.size() where none has compute.
// NVIDIA's driver runs kernels launched through VK_NVX_binary_import at half speed on its graphics
// family (family 0 of the H200: the 16-bit GEMM at 162-168 TFLOP/s, against 299-322 on its compute
// family, docs/bench/h200-vulkan-ptx.txt); shaders ran at the same speed on either.
inline std::uint32_t compute_queue_family(std::span<const VkQueueFamilyProperties> families) {
  const auto n = static_cast<std::uint32_t>(families.size());
  std::uint32_t any = n;
  for (std::uint32_t i = 0; i < n; ++i) {
    const VkQueueFlags f = families[i].queueFlags;
    if (!(f & VK_QUEUE_COMPUTE_BIT)) continue;
    if (!(f & VK_QUEUE_GRAPHICS_BIT)) return i;
    if (any == n) any = i;
  }
  return any;
}

}  // namespace tessera::vulkan
