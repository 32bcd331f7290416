// The Vulkan plugin's choice of queue family (plugins/vulkan/queue_family.h).
#include <gtest/gtest.h>

#include <vector>

#include "../../plugins/vulkan/queue_family.h"

namespace {

using tessera::vulkan::compute_queue_family;

std::vector<VkQueueFamilyProperties> families(std::vector<VkQueueFlags> flags) {
  std::vector<VkQueueFamilyProperties> out;
  for (const VkQueueFlags f : flags) {
    VkQueueFamilyProperties p{};
    p.queueFlags = f;
    p.queueCount = 1;
    out.push_back(p);
  }
  return out;
}

constexpr VkQueueFlags kGraphics = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT |
                                   VK_QUEUE_TRANSFER_BIT | VK_QUEUE_SPARSE_BINDING_BIT;
constexpr VkQueueFlags kCompute =
    VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT | VK_QUEUE_SPARSE_BINDING_BIT;
constexpr VkQueueFlags kTransfer = VK_QUEUE_TRANSFER_BIT | VK_QUEUE_SPARSE_BINDING_BIT;

TEST(VulkanQueueFamily, ADedicatedComputeFamilyWinsOverTheGraphicsOne) {
  // An NVIDIA H200's families (driver 580): graphics, transfer, compute, video decode, optical
  // flow.
  EXPECT_EQ(compute_queue_family(families({0xf, 0xc, 0xe, 0x2c, 0x10c})), 2u);
  EXPECT_EQ(compute_queue_family(families({kGraphics, kCompute})), 1u);
}

TEST(VulkanQueueFamily, TheGraphicsFamilyServesWhereItAloneComputes) {
  EXPECT_EQ(compute_queue_family(families({kGraphics})), 0u);  // lavapipe
  EXPECT_EQ(compute_queue_family(families({kTransfer, kGraphics, kGraphics})), 1u);
}

TEST(VulkanQueueFamily, NoComputeFamilyGivesTheCount) {
  EXPECT_EQ(compute_queue_family(families({kTransfer, kTransfer})), 2u);
  EXPECT_EQ(compute_queue_family({}), 0u);
}

}  // namespace
