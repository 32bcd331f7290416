// The Vulkan half of the portable kernel layer (../common/portable.h): a portable kernel is the
// SPIR-V module NAME.tk.spv (or, for the few the plugin writes itself, shaders/NAME.comp as
// NAME.spv: Pipelines::get), specialised with the work-group size (constant 0), the shared
// scratch size (1) and V0..V3 (2..5); tensors are push descriptors, words push constants. Where
// the device has PTX kernels (CuKernels), the 16-bit GEMM's launches run those instead, as do the
// portable kernels' variants built as PTX.
#include <algorithm>

#include <fmt/format.h>

#include "vulkan.h"

namespace tessera::vulkan {

VulkanLauncher::VulkanLauncher(VulkanDevice& device, common::GpuTraits traits)
    : device_(device), traits_(traits) {}

Device& VulkanLauncher::device() {
  return device_;
}

void VulkanLauncher::launch(const common::Launch& l) {
  std::array<std::int32_t, 2 + common::kMaxVariants> spec{l.group_size(),
                                                          std::max(l.shared_floats(), 1)};
  std::copy(l.variant().begin(), l.variant().end(), spec.begin() + 2);
  std::array<Binding, common::kMaxBindings> bindings{};
  const auto b = l.bindings();
  for (std::size_t i = 0; i < b.size(); ++i)
    bindings[i] = {&static_cast<const VulkanBuffer&>(b[i].tensor->buffer()).allocation(),
                   b[i].write, true};
  const auto grid = l.grid();
  if (CuKernels* cu = device_.cu_kernels(); cu && l.kernel().starts_with("gemm_coopmat")) {
    // Every module but the plainest is compiled by the driver on first use; one it refuses fails
    // the op with the way out.
    VkCuFunctionNVX f = VK_NULL_HANDLE;
    try {
      f = cu->function(CuKernels::gemm_module(l.kernel().ends_with("_bf16"), l.variant()[0]));
    } catch (const BackendError& e) {
      throw BackendError(fmt::format(
          "{}; TESSERA_VULKAN_PTX=0 runs the 16-bit GEMMs on cooperative matrix instead",
          e.what()));
    }
    device_.vk_queue_object().launch_cu(l.label(), f, std::span(bindings.data(), b.size()),
                                        l.words(), {grid[0], grid[1], 1},
                                        static_cast<std::uint32_t>(l.group_size()));
    return;
  }
  // The f32 GEMM through cp.async (offered only where the device has its modules); a module the
  // driver refuses fails the op with the way out.
  if (CuKernels* cu = device_.cu_kernels(); cu && l.kernel() == "gemm_ffma") {
    VkCuFunctionNVX f = VK_NULL_HANDLE;
    try {
      f = cu->function(CuKernels::ffma_module(l.variant()[0]));
    } catch (const BackendError& e) {
      throw BackendError(fmt::format(
          "{}; TESSERA_GEMM_FFMA=0 runs the f32 GEMMs on the portable kernel instead", e.what()));
    }
    device_.vk_queue_object().launch_cu(l.label(), f, std::span(bindings.data(), b.size()),
                                        l.words(), {grid[0], grid[1], 1},
                                        static_cast<std::uint32_t>(l.group_size()));
    return;
  }
  // A portable kernel's variant built as PTX too (CuKernels: the f32 GEMM's main ones).
  if (CuKernels* cu = device_.cu_kernels(); cu && CuKernels::has_portable(l.kernel())) {
    if (const VkCuFunctionNVX f =
            cu->function_if_built(CuKernels::portable_module(l.kernel(), l.variant()))) {
      device_.vk_queue_object().launch_cu(l.label(), f, std::span(bindings.data(), b.size()),
                                          l.words(), {grid[0], grid[1], 1},
                                          static_cast<std::uint32_t>(l.group_size()));
      return;
    }
  }
  // Kernels use bindings 0..n-1 only; the rest of the layout stays unwritten.
  const std::string shader = fmt::format("{}.tk", l.kernel());
  const VkPipeline p = device_.pipelines().get(shader, spec);
  device_.vk_queue_object().dispatch(l.label(), p, std::span(bindings.data(), b.size()), l.words(),
                                     {grid[0], grid[1], 1});
}

}  // namespace tessera::vulkan
