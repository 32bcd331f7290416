#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "tessera/log.h"
#include "vulkan.h"

namespace tessera::vulkan {
namespace {

constexpr VkPipelineStageFlags kWork =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kAll = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                               VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

// A memory barrier after the work of |src_stage| (kWork, or all commands where the device launches
// PTX kernels: VulkanQueue::launch_cu).
void barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkPipelineStageFlags dst_stage,
             VkAccessFlags dst_access) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = kWrites;
  b.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
}

Access range(const Allocation& a, VkDeviceSize offset, VkDeviceSize bytes, bool write) {
  return {a.block->buffer, a.offset + offset, a.offset + offset + bytes, write};
}

// How long a host wait polls before it blocks (VulkanQueue::spin_).
constexpr auto kSpin = std::chrono::milliseconds(100);

const Allocation& alloc_of(const Buffer& b) {
  return static_cast<const VulkanBuffer&>(b).allocation();
}

}  // namespace

VulkanQueue::VulkanQueue(VulkanDevice& device)
    : dev_(device),
      // The extension does not say which pipeline stage a PTX kernel's launch belongs to: where
      // they run, every barrier orders all commands.
      work_(device.cu_kernels() ? VkPipelineStageFlags{VK_PIPELINE_STAGE_ALL_COMMANDS_BIT} : kWork),
      spin_(device.info().type != DeviceType::cpu) {
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = device.queue_family();
  check(vkCreateCommandPool(device.handle(), &pi, nullptr, &pool_), "vkCreateCommandPool",
        device.name());
  if (device.timeline_semaphores()) {
    VkSemaphoreTypeCreateInfo ti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    ti.initialValue = 0;
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &ti, 0};
    check(vkCreateSemaphore(device.handle(), &si, nullptr, &timeline_), "vkCreateSemaphore",
          device.name());
  }
}

VulkanQueue::~VulkanQueue() = default;  // never destroyed before exit (see ~VulkanDevice)

VkCommandBuffer VulkanQueue::recording() {
  if (open_) return open_->cb;
  reclaim(false);
  std::unique_ptr<Batch> b;
  if (!spare_.empty()) {
    b = std::move(spare_.back());
    spare_.pop_back();
  } else {
    b = std::make_unique<Batch>();
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(dev_.handle(), &ai, &b->cb), "vkAllocateCommandBuffers",
          dev_.name());
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vkCreateFence(dev_.handle(), &fi, nullptr, &b->fence), "vkCreateFence", dev_.name());
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(b->cb, &bi), "vkBeginCommandBuffer", dev_.name());
  // Work of earlier batches comes first: one barrier at the start of each batch.
  barrier(b->cb, work_, work_, kAll);
  b->names.clear();
  if (profiling_) {
    if (!b->queries) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = kQueries;
      const VkResult r = vkCreateQueryPool(dev_.handle(), &qi, nullptr, &b->queries);
      if (r != VK_SUCCESS) {  // the batch goes back unused; the queue stays usable
        b->queries = VK_NULL_HANDLE;
        vkEndCommandBuffer(b->cb);
        vkResetCommandBuffer(b->cb, 0);
        spare_.push_back(std::move(b));
        check(r, "vkCreateQueryPool", dev_.name());
      }
    }
    vkCmdResetQueryPool(b->cb, b->queries, 0, kQueries);
    vkCmdWriteTimestamp(b->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->queries, 0);
  }
  open_ = std::move(b);
  dispatches_ = 0;
  pending_.clear();
  return open_->cb;
}

void VulkanQueue::mark(std::string_view name) {
  if (!profiling_ || !open_->queries) return;
  open_->names.emplace_back(name);
  vkCmdWriteTimestamp(open_->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, open_->queries,
                      static_cast<std::uint32_t>(open_->names.size()));
  if (open_->names.size() + 1 >= kQueries) submit();
}

void VulkanQueue::collect(Batch& b) {
  if (b.names.empty()) return;
  const auto n = static_cast<std::uint32_t>(b.names.size()) + 1;
  std::vector<std::uint64_t> ts(n);
  const VkResult r = vkGetQueryPoolResults(
      dev_.handle(), b.queries, 0, n, n * sizeof(std::uint64_t), ts.data(), sizeof(std::uint64_t),
      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  if (r == VK_SUCCESS && profiling_) {
    const std::uint32_t bits = dev_.timestamp_bits();
    const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
    const double period = static_cast<double>(dev_.properties().limits.timestampPeriod) * 1e-9;
    for (std::size_t i = 0; i < b.names.size(); ++i) {
      times_.add(b.names[i], static_cast<double>((ts[i + 1] - ts[i]) & mask) * period);
    }
  }
  b.names.clear();
}

bool VulkanQueue::start_profiling() {
  std::lock_guard lock(mu_);
  if (dev_.timestamp_bits() == 0 || dev_.properties().limits.timestampPeriod <= 0) return false;
  wait_all();  // what was enqueued before is not timed
  times_.clear();
  profiling_ = true;
  return true;
}

std::vector<KernelTime> VulkanQueue::stop_profiling() {
  std::lock_guard lock(mu_);
  wait_all();
  profiling_ = false;
  return times_.take();
}

void VulkanQueue::hazard(std::span<const Access> accesses) {
  bool conflict = false;
  for (const Access& a : accesses)
    for (const Access& p : pending_)
      if (a.buffer == p.buffer && a.begin < p.end && p.begin < a.end && (a.write || p.write))
        conflict = true;
  if (conflict) {
    barrier(open_->cb, work_, work_, kAll);
    pending_.clear();
  }
  pending_.insert(pending_.end(), accesses.begin(), accesses.end());
}

void VulkanQueue::submit() {
  if (!open_) return;
  // Results become visible to the host once the fence signals.
  barrier(open_->cb, work_, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  check(vkEndCommandBuffer(open_->cb), "vkEndCommandBuffer", dev_.name());
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &open_->cb;
  const std::uint64_t value = submitted_ + 1;
  VkTimelineSemaphoreSubmitInfo ti{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  if (timeline_) {
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = &value;
    si.pNext = &ti;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &timeline_;
  }
  const VkResult r = vkQueueSubmit(dev_.vk_queue(), 1, &si, open_->fence);
  if (r == VK_SUCCESS) submitted_ = value;
  if (r != VK_SUCCESS) {
    // The batch is lost; drop it so that the queue stays usable, and report.
    vkResetCommandBuffer(open_->cb, 0);
    open_->names.clear();
    for (auto& [pool, a] : open_->frees) pool->free(a);
    open_->frees.clear();
    spare_.push_back(std::move(open_));
    check(r, "vkQueueSubmit", dev_.name());
  }
  in_flight_.push_back(std::move(open_));
}

template <class Poll>
void VulkanQueue::await(Poll done) const {
  if (!spin_) return;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}

void VulkanQueue::reclaim(bool wait) {
  while (!in_flight_.empty()) {
    Batch& b = *in_flight_.front();
    if (wait) {
      await([&] { return vkGetFenceStatus(dev_.handle(), b.fence) != VK_NOT_READY; });
      check(vkWaitForFences(dev_.handle(), 1, &b.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences",
            dev_.name());
    } else if (vkGetFenceStatus(dev_.handle(), b.fence) != VK_SUCCESS) {
      break;
    }
    collect(b);
    vkResetFences(dev_.handle(), 1, &b.fence);
    vkResetCommandBuffer(b.cb, 0);
    for (auto& [pool, a] : b.frees) pool->free(a);
    b.frees.clear();
    spare_.push_back(std::move(in_flight_.front()));
    in_flight_.pop_front();
  }
}

void VulkanQueue::wait_all() {
  submit();
  reclaim(true);
}

void VulkanQueue::dispatch(std::string_view name, VkPipeline pipeline,
                           std::span<const Binding> bindings, std::span<const std::int32_t> push,
                           std::array<std::uint32_t, 3> groups) {
  std::lock_guard lock(mu_);
  VkCommandBuffer cb = recording();
  std::array<VkDescriptorBufferInfo, Pipelines::kBindings> infos{};
  std::array<VkWriteDescriptorSet, Pipelines::kBindings> writes{};
  std::array<Access, Pipelines::kBindings> accesses{};
  std::size_t tracked = 0;
  for (std::size_t i = 0; i < bindings.size(); ++i) {
    const Allocation& a = *bindings[i].alloc;
    infos[i] = {a.block->buffer, a.offset, a.size};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstBinding = static_cast<std::uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
    if (bindings[i].used) accesses[tracked++] = range(a, 0, a.size, bindings[i].write);
  }
  hazard(std::span(accesses.data(), tracked));
  Pipelines& p = dev_.pipelines();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  dev_.push_descriptor(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0,
                       static_cast<std::uint32_t>(bindings.size()), writes.data());
  vkCmdPushConstants(cb, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     static_cast<std::uint32_t>(push.size_bytes()), push.data());
  vkCmdDispatch(cb, groups[0], groups[1], groups[2]);
  mark(name);
  if (open_ && ++dispatches_ >= kBatch) submit();
}

void VulkanQueue::launch_cu(std::string_view name, VkCuFunctionNVX function,
                            std::span<const Binding> bindings, std::span<const std::int32_t> words,
                            std::array<std::uint32_t, 3> groups, std::uint32_t group_size) {
  CuKernels& cu = *dev_.cu_kernels();
  // The kernel's parameters (vulkan.h's CuKernels): kMaxBindings addresses (the unused ones binding
  // 0's), the words as one 128-byte struct, and the unused __local pointer.
  std::array<VkDeviceAddress, common::kMaxBindings> addresses{};
  std::array<Access, common::kMaxBindings> accesses{};
  std::size_t tracked = 0;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const Allocation& a = *bindings[i < bindings.size() ? i : 0].alloc;
    addresses[i] = a.block->address + a.offset;
    if (i < bindings.size() && bindings[i].used)
      accesses[tracked++] = range(a, 0, a.size, bindings[i].write);
  }
  struct {
    std::int32_t w[Pipelines::kPushWords];
  } params{};
  std::memcpy(params.w, words.data(), std::min(words.size_bytes(), sizeof params.w));
  const VkDeviceAddress no_local = 0;
  std::array<const void*, common::kMaxBindings + 2> args{};
  for (std::size_t i = 0; i < addresses.size(); ++i) args[i] = &addresses[i];
  args[common::kMaxBindings] = &params;
  args[common::kMaxBindings + 1] = &no_local;
  VkCuLaunchInfoNVX li{VK_STRUCTURE_TYPE_CU_LAUNCH_INFO_NVX};
  li.function = function;
  li.gridDimX = groups[0];
  li.gridDimY = groups[1];
  li.gridDimZ = groups[2];
  li.blockDimX = group_size;
  li.blockDimY = li.blockDimZ = 1;
  li.paramCount = args.size();
  li.pParams = args.data();
  std::lock_guard lock(mu_);
  VkCommandBuffer cb = recording();
  hazard(std::span(accesses.data(), tracked));
  cu.launch(cb, &li);
  mark(name);
  if (open_ && ++dispatches_ >= kBatch) submit();
}

void VulkanQueue::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const Allocation& d = alloc_of(dst);
  std::lock_guard lock(mu_);
  reclaim(false);
  if (d.host() && !open_ && in_flight_.empty()) {  // idle and host-visible: copy in place
    std::memcpy(d.host() + offset, src, bytes);
    return;
  }
  VkCommandBuffer cb = recording();
  const Allocation s = dev_.staging_pool().allocate(bytes);
  std::memcpy(s.host(), src, bytes);
  const Access a[] = {range(d, offset, bytes, true)};
  hazard(a);
  const VkBufferCopy region{s.offset, d.offset + offset, bytes};
  vkCmdCopyBuffer(cb, s.block->buffer, d.block->buffer, 1, &region);
  open_->frees.emplace_back(&dev_.staging_pool(), s);
  mark("(write from host)");
}

void VulkanQueue::submit_and_wait_unlocked(std::unique_lock<std::mutex>& lock) {
  submit();
  const std::uint64_t target = submitted_;
  lock.unlock();
  await([&] {
    std::uint64_t value = 0;
    return vkGetSemaphoreCounterValue(dev_.handle(), timeline_, &value) != VK_SUCCESS ||
           value >= target;
  });
  VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &target;
  const VkResult r = vkWaitSemaphores(dev_.handle(), &wi, UINT64_MAX);
  lock.lock();
  check(r, "vkWaitSemaphores", dev_.name());
  reclaim(false);
}

void VulkanQueue::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  const Allocation& s = alloc_of(src);
  std::unique_lock lock(mu_);
  // With timeline semaphores, every read goes through a staging copy taken at its place in the
  // stream and waits without holding the queue: work other threads record meanwhile may write
  // |src| (host-visible memory included) without changing what this read returns.
  if (s.host() && !timeline_) {
    wait_all();
    std::memcpy(dst, s.host() + offset, bytes);
    return;
  }
  const Allocation st = dev_.staging_pool().allocate(bytes);
  try {
    VkCommandBuffer cb = recording();
    const Access a[] = {range(s, offset, bytes, false)};
    hazard(a);
    const VkBufferCopy region{s.offset + offset, st.offset, bytes};
    vkCmdCopyBuffer(cb, s.block->buffer, st.block->buffer, 1, &region);
    mark("(read to host)");
    if (timeline_)
      submit_and_wait_unlocked(lock);
    else
      wait_all();
  } catch (...) {
    dev_.staging_pool().free(st);
    throw;
  }
  std::memcpy(dst, st.host(), bytes);
  dev_.staging_pool().free(st);
}

void VulkanQueue::copy(const Buffer& src, std::size_t src_offset, Buffer& dst,
                       std::size_t dst_offset, std::size_t bytes) {
  if (bytes == 0) return;
  const Allocation &s = alloc_of(src), &d = alloc_of(dst);
  std::lock_guard lock(mu_);
  VkCommandBuffer cb = recording();
  const Access a[] = {range(s, src_offset, bytes, false), range(d, dst_offset, bytes, true)};
  hazard(a);
  const VkBufferCopy region{s.offset + src_offset, d.offset + dst_offset, bytes};
  vkCmdCopyBuffer(cb, s.block->buffer, d.block->buffer, 1, &region);
  mark("(copy)");
}

void VulkanQueue::synchronize() {
  std::lock_guard lock(mu_);
  wait_all();
}

void VulkanQueue::release(MemoryPool& pool, const Allocation& a) noexcept {
  std::lock_guard lock(mu_);
  if (open_) {
    open_->frees.emplace_back(&pool, a);
  } else if (!in_flight_.empty()) {
    in_flight_.back()->frees.emplace_back(&pool, a);
  } else {
    pool.free(a);
  }
}

}  // namespace tessera::vulkan
