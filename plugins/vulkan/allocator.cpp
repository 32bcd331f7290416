#include <algorithm>
#include <optional>

#include "tessera/log.h"
#include "vulkan.h"

namespace tessera::vulkan {
namespace {

constexpr VkDeviceSize kBlockSize = 64ull << 20;  // suballocated blocks
constexpr VkDeviceSize kDedicated = 16ull << 20;  // larger requests get a block of their own
constexpr VkDeviceSize kAlignment = 256;          // >= every device's storage offset alignment

VkDeviceSize align(VkDeviceSize v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

MemoryPool::MemoryPool(VulkanDevice& device, std::uint32_t type, std::uint32_t heap, bool mapped,
                       bool addresses)
    : device_(device), type_(type), heap_(heap), mapped_(mapped), addresses_(addresses) {
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(device.physical(), &mp);
  heap_size_ = mp.memoryHeaps[heap].size;
}

MemoryPool::~MemoryPool() = default;  // never destroyed before exit (see ~VulkanDevice)

MemoryBlock* MemoryPool::new_block(VkDeviceSize size) {
  const VkDevice dev = device_.handle();
  auto block = std::make_unique<MemoryBlock>();
  block->size = size;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT |
             (addresses_ ? VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT : 0);
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (vkCreateBuffer(dev, &bi, nullptr, &block->buffer) != VK_SUCCESS) return nullptr;
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, block->buffer, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type_;
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  if (addresses_) ai.pNext = &flags;
  if (!(req.memoryTypeBits & (1u << type_)) ||
      vkAllocateMemory(dev, &ai, nullptr, &block->memory) != VK_SUCCESS) {
    vkDestroyBuffer(dev, block->buffer, nullptr);
    return nullptr;
  }
  vkBindBufferMemory(dev, block->buffer, block->memory, 0);
  if (addresses_) {
    VkBufferDeviceAddressInfo info{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    info.buffer = block->buffer;
    block->address = vkGetBufferDeviceAddress(dev, &info);
  }
  if (mapped_) {
    void* p = nullptr;
    if (vkMapMemory(dev, block->memory, 0, VK_WHOLE_SIZE, 0, &p) != VK_SUCCESS) {
      vkDestroyBuffer(dev, block->buffer, nullptr);
      vkFreeMemory(dev, block->memory, nullptr);
      return nullptr;
    }
    block->mapped = static_cast<std::byte*>(p);
  }
  block->free_[0] = size;
  reserved_ += size;
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

Allocation MemoryPool::allocate(VkDeviceSize bytes) {
  const VkDeviceSize size = align(std::max<VkDeviceSize>(bytes, 1));
  std::lock_guard lock(mu_);
  auto out_of_memory = [&] {
    const std::int64_t budget = device_.heap_budget(heap_);
    const VkDeviceSize free = budget >= 0 ? static_cast<VkDeviceSize>(budget) + (reserved_ - used_)
                                          : heap_size_ - std::min(heap_size_, used_);
    return OutOfMemory(device_.name(), bytes, free);
  };
  // More than the heap holds is a lack of memory; more than one buffer may span is a limit.
  if (used_ + size > heap_size_) throw out_of_memory();
  if (size > device_.max_buffer()) throw device_.buffer_limit_error(bytes);
  auto take = [&](MemoryBlock* b) -> std::optional<Allocation> {
    for (auto it = b->free_.begin(); it != b->free_.end(); ++it) {  // first fit
      if (it->second < size) continue;
      const VkDeviceSize offset = it->first, left = it->second - size;
      b->free_.erase(it);
      if (left) b->free_[offset + size] = left;
      used_ += size;
      return Allocation{b, offset, size};
    }
    return std::nullopt;
  };
  if (size <= kDedicated)
    for (auto& b : blocks_)
      if (b->size == kBlockSize)
        if (auto a = take(b.get())) return *a;
  MemoryBlock* b = new_block(size <= kDedicated ? kBlockSize : size);
  if (!b) throw out_of_memory();
  return *take(b);
}

void MemoryPool::free(const Allocation& a) noexcept {
  std::lock_guard lock(mu_);
  used_ -= a.size;
  MemoryBlock* b = a.block;
  auto [it, inserted] = b->free_.emplace(a.offset, a.size);
  if (auto next = std::next(it); next != b->free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b->free_.erase(next);
  }
  if (it != b->free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      b->free_.erase(it);
      it = prev;
    }
  }
  // A dedicated block that is entirely free goes back to the driver.
  if (b->size != kBlockSize && it->first == 0 && it->second == b->size) {
    const VkDevice dev = device_.handle();
    if (b->mapped) vkUnmapMemory(dev, b->memory);
    vkDestroyBuffer(dev, b->buffer, nullptr);
    vkFreeMemory(dev, b->memory, nullptr);
    reserved_ -= b->size;
    std::erase_if(blocks_, [&](const auto& p) { return p.get() == b; });
  }
}

VkDeviceSize MemoryPool::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

VulkanBuffer::~VulkanBuffer() {
  device_.vk_queue_object().release(device_.device_pool(), alloc_);
}

std::unique_ptr<Buffer> VulkanAllocator::allocate(std::size_t bytes) {
  const Allocation a = device_.device_pool().allocate(bytes);
  return std::make_unique<VulkanBuffer>(device_, a, static_cast<std::size_t>(a.size));
}

MemoryInfo VulkanAllocator::memory() const {
  MemoryPool& pool = device_.device_pool();
  const VkDeviceSize used = pool.used();
  return {static_cast<std::size_t>(pool.heap_size()),
          static_cast<std::size_t>(pool.heap_size() - std::min(pool.heap_size(), used))};
}

}  // namespace tessera::vulkan
