// PTX kernels through VK_NVX_binary_import (vulkan.h's CuKernels).
#include <set>

#include <fmt/format.h>

#include "tessera/embedded.h"
#include "tessera/log.h"
#include "vulkan.h"

namespace tessera::vulkan {

CuKernels::CuKernels(VulkanDevice& device) : dev_(device) {
  const VkDevice d = device.handle();
  create_module_ =
      reinterpret_cast<PFN_vkCreateCuModuleNVX>(vkGetDeviceProcAddr(d, "vkCreateCuModuleNVX"));
  create_function_ =
      reinterpret_cast<PFN_vkCreateCuFunctionNVX>(vkGetDeviceProcAddr(d, "vkCreateCuFunctionNVX"));
  launch = reinterpret_cast<PFN_vkCmdCuLaunchKernelNVX>(
      vkGetDeviceProcAddr(d, "vkCmdCuLaunchKernelNVX"));
  if (!create_module_ || !create_function_ || !launch)
    throw BackendError(
        fmt::format("{}: VK_NVX_binary_import's entry points are missing", dev_.name()));
}

bool CuKernels::built() {
  return !embedded_file(gemm_module(false, 0)).empty();
}

std::string CuKernels::gemm_module(bool bf16, std::int32_t v0) {
  return fmt::format("gemm_wgmma_{}_{}.ptx", bf16 ? 1 : 0, v0);
}

std::string CuKernels::ffma_module(std::int32_t v0) {
  return fmt::format("gemm_ffma_{}.ptx", v0);
}

bool CuKernels::has_ffma() {
  return !embedded_file(ffma_module(1)).empty();
}

std::string CuKernels::portable_module(std::string_view kernel, std::span<const std::int32_t> v) {
  std::string name = fmt::format("{}.tk", kernel);
  for (const std::int32_t x : v) name += fmt::format("_{}", x);
  return name + ".ptx";
}

bool CuKernels::has_portable(std::string_view kernel) {
  // The kernels named by the embedded NAME.tk_V0_V1_V2_V3.ptx, found once.
  static const std::set<std::string, std::less<>> kernels = [] {
    std::set<std::string, std::less<>> names;
    for (const EmbeddedFile& f : embedded_files())
      if (const auto at = f.name.find(".tk_");
          at != std::string_view::npos && f.name.ends_with(".ptx"))
        names.emplace(f.name.substr(0, at));
    return names;
  }();
  return kernels.contains(kernel);
}

VkCuFunctionNVX CuKernels::function_if_built(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    if (const auto it = functions_.find(name); it != functions_.end()) return it->second;
  }
  if (!embedded_file(name).empty()) {
    try {
      return function(name);
    } catch (const BackendError& e) {
      // The launch keeps its SPIR-V pipeline, which computes the same.
      log().warn("{}; its SPIR-V pipeline runs instead", e.what());
    }
  }
  std::lock_guard lock(mu_);
  return functions_[name] = VK_NULL_HANDLE;
}

VkCuFunctionNVX CuKernels::function(const std::string& name) {
  std::lock_guard lock(mu_);
  if (const auto it = functions_.find(name); it != functions_.end() && it->second)
    return it->second;
  const auto ptx = embedded_file(name);
  if (ptx.empty())
    throw BackendError(
        fmt::format("{}: the PTX module {} is not in the plugin", dev_.name(), name));
  // The driver reads a PTX module as a NUL-terminated string.
  std::string text(reinterpret_cast<const char*>(ptx.data()), ptx.size());
  VkCuModuleCreateInfoNVX mi{VK_STRUCTURE_TYPE_CU_MODULE_CREATE_INFO_NVX};
  mi.dataSize = text.size() + 1;
  mi.pData = text.c_str();
  VkCuModuleNVX module = VK_NULL_HANDLE;
  check(create_module_(dev_.handle(), &mi, nullptr, &module),
        fmt::format("vkCreateCuModuleNVX ({})", name), dev_.name());
  VkCuFunctionCreateInfoNVX fi{VK_STRUCTURE_TYPE_CU_FUNCTION_CREATE_INFO_NVX};
  fi.module = module;
  fi.pName = "tk_main";
  VkCuFunctionNVX function = VK_NULL_HANDLE;
  check(create_function_(dev_.handle(), &fi, nullptr, &function),
        fmt::format("vkCreateCuFunctionNVX ({}: tk_main)", name), dev_.name());
  log().debug("{}: PTX module {} loaded", dev_.name(), name);
  // Modules and functions live as long as the device (which lives until exit).
  return functions_[name] = function;
}

}  // namespace tessera::vulkan
