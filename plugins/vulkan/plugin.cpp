// Entry point of the Vulkan plugin: one instance, every usable physical device.
#include <memory>

#include <fmt/format.h>

#include "../common/backend.h"
#include "../common/ops.h"
#include "tessera/log.h"
#include "tessera/plugin.h"
#include "vulkan.h"

namespace tessera::vulkan {
namespace {

class VulkanBackend final : public common::OwningBackend {
 public:
  VulkanBackend() {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "tessera";
    app.pEngineName = "tessera";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    const VkResult r = vkCreateInstance(&ci, nullptr, &instance_);
    if (r != VK_SUCCESS) {
      status_ = fmt::format(
          "no Vulkan driver (vkCreateInstance: {}); install one, e.g. "
          "mesa-vulkan-drivers, or a GPU vendor's driver",
          result_name(r));
      return;
    }
    std::uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance_, &n, nullptr);
    std::vector<VkPhysicalDevice> physical(n);
    vkEnumeratePhysicalDevices(instance_, &n, physical.data());
    std::vector<std::string> skipped;
    for (VkPhysicalDevice pd : physical) {
      try {
        devices_.push_back(
            std::make_unique<VulkanDevice>(instance_, pd, static_cast<int>(devices_.size())));
      } catch (const Error& e) {
        skipped.push_back(e.what());
        log().warn("vulkan: skipping a device: {}", e.what());
      }
    }
    if (devices_.empty())
      status_ = skipped.empty()
                    ? "no Vulkan device found"
                    : fmt::format("no usable Vulkan device: {}", fmt::join(skipped, "; "));
  }

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
};

std::unique_ptr<Backend> create_backend() {
  common::check_gemm_environment();
  common::check_attention_environment();
  (void)ptx_allowed();
  return std::make_unique<VulkanBackend>();
}

}  // namespace
}  // namespace tessera::vulkan

TESSERA_DEFINE_PLUGIN("vulkan", "0.1.0", tessera::vulkan::create_backend)
