// The Vulkan plugin: every physical device with a compute queue (Vulkan 1.2 and
// VK_KHR_push_descriptor) as vulkan:N. Memory is suballocated from large blocks; dispatches are
// recorded into command buffers and submitted in batches with barriers only between dependent
// work; compute pipelines come from the portable kernels' SPIR-V, embedded at build time
// (../common/portable.cmake: NAME.tk.spv), and each is cached as its VkPipelineCache data under
// TESSERA_CACHE_DIR. Work goes to a dedicated compute queue family where the device has one
// (queue_family.h). On NVIDIA's Hopper GPUs the f16/bf16 GEMM runs as PTX through
// VK_NVX_binary_import instead (CuKernels).
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../common/portable.h"
#include "tessera/device.h"
#include "tessera/errors.h"

namespace tessera::vulkan {

// "VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)".
std::string result_name(VkResult r);
// Throws BackendError "what on DEVICE failed: VK_..." unless r is VK_SUCCESS.
void check(VkResult r, std::string_view what, std::string_view device);

class VulkanDevice;

// One VkDeviceMemory block bound to one VkBuffer over all of it; suballocations are ranges of it.
struct MemoryBlock {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  VkDeviceAddress address = 0;                 // the buffer's, where the pool gives addresses
  std::byte* mapped = nullptr;                 // set when the memory type is host-visible
  std::map<VkDeviceSize, VkDeviceSize> free_;  // offset -> size of the free ranges
};

struct Allocation {
  MemoryBlock* block = nullptr;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  std::byte* host() const { return block->mapped ? block->mapped + offset : nullptr; }
};

// Suballocates one memory type from blocks of kBlockSize (larger requests get a block of their
// own). Thread-safe. allocate() throws OutOfMemory naming the device, the request and what is
// free; free() returns a range at once (callers defer it until the GPU is done with it). With
// |addresses|, each block's buffer has a device address (bufferDeviceAddress must be enabled),
// which PTX kernels take instead of descriptors (CuKernels).
class MemoryPool {
 public:
  MemoryPool(VulkanDevice& device, std::uint32_t type, std::uint32_t heap, bool mapped,
             bool addresses = false);
  ~MemoryPool();
  Allocation allocate(VkDeviceSize bytes);
  void free(const Allocation& a) noexcept;
  VkDeviceSize used() const;
  VkDeviceSize heap_size() const { return heap_size_; }
  bool mapped() const { return mapped_; }

 private:
  MemoryBlock* new_block(VkDeviceSize size);
  VulkanDevice& device_;
  std::uint32_t type_, heap_;
  bool mapped_;
  bool addresses_;
  VkDeviceSize heap_size_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MemoryBlock>> blocks_;
  VkDeviceSize reserved_ = 0;  // bytes of all blocks
  VkDeviceSize used_ = 0;      // bytes handed out
};

// A suballocation of the device pool; released after the work queued on it has finished.
class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(VulkanDevice& device, Allocation a, std::size_t size)
      : device_(device), alloc_(a), size_(size) {}
  ~VulkanBuffer() override;
  std::size_t size() const override { return size_; }
  void* host_ptr() const override { return alloc_.host(); }
  const Allocation& allocation() const { return alloc_; }

 private:
  VulkanDevice& device_;
  Allocation alloc_;
  std::size_t size_;
};

class VulkanAllocator final : public Allocator {
 public:
  explicit VulkanAllocator(VulkanDevice& device) : device_(device) {}
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override;
  MemoryInfo memory() const override;

 private:
  VulkanDevice& device_;
};

// A buffer range a command reads or writes (for the dependency tracking between commands).
struct Access {
  VkBuffer buffer;
  VkDeviceSize begin, end;
  bool write;
};

// One storage-buffer binding of a dispatch.
struct Binding {
  const Allocation* alloc;
  bool write;
  bool used = true;  // false: a placeholder for a binding the shader declares but does not use
};

// The device's queue. Commands are recorded into a command buffer that is submitted when a host
// read or synchronize() needs it, or every kBatch dispatches; a memory barrier goes in only when
// a command touches a range an earlier command of the batch wrote (or writes one it read).
// Thread-safe (one lock around recording).
class VulkanQueue final : public Queue {
 public:
  static constexpr int kBatch = 100;
  explicit VulkanQueue(VulkanDevice& device);
  ~VulkanQueue() override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
            std::size_t bytes) override;
  void synchronize() override;
  // Kernel profiling: a timestamp after every command of a batch; a kernel's time is the span
  // from the previous timestamp to its own (docs/performance.md, "Profiling kernels").
  bool start_profiling() override;
  std::vector<KernelTime> stop_profiling() override;

  // Records |pipeline| (the kernel |name|, for profiling) over |groups| work-groups.
  void dispatch(std::string_view name, VkPipeline pipeline, std::span<const Binding> bindings,
                std::span<const std::int32_t> push, std::array<std::uint32_t, 3> groups);
  // Records the PTX kernel |function| (CuKernels; the kernel |name|, for profiling) over |groups|
  // work-groups of |group_size| invocations, with the bindings' device addresses and |words| as
  // its parameters (CuKernels says how). Only where the device has CuKernels.
  void launch_cu(std::string_view name, VkCuFunctionNVX function, std::span<const Binding> bindings,
                 std::span<const std::int32_t> words, std::array<std::uint32_t, 3> groups,
                 std::uint32_t group_size);
  // Frees |a| of |pool| once the work recorded so far has finished.
  void release(MemoryPool& pool, const Allocation& a) noexcept;

 private:
  struct Batch {
    VkCommandBuffer cb = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    std::vector<std::pair<MemoryPool*, Allocation>> frees;  // after the fence
    // While profiling: timestamp 0 at the start, timestamp i + 1 after command names[i].
    VkQueryPool queries = VK_NULL_HANDLE;
    std::vector<std::string> names;
  };
  static constexpr std::uint32_t kQueries = 2 * kBatch;  // timestamps per batch
  // While profiling, a timestamp after the command just recorded (submitting a full batch).
  void mark(std::string_view name);
  // Adds a finished batch's timestamps to times_.
  void collect(Batch& b);
  VkCommandBuffer recording();                    // begins a batch if none is open
  void hazard(std::span<const Access> accesses);  // barrier if needed, then track
  void submit();                                  // ends and submits the open batch
  void wait_all();
  void reclaim(bool wait);
  // Before a host wait blocks in the driver: polls |done| (yielding the core between polls) for
  // up to 100 ms where spin_, so that the wait returns as soon as the work does instead of when
  // the driver wakes the thread (on the H200 that took 50-230 us a wait: 1024^3 products 1.2x
  // as fast from idle, the MLP's training step 1.06x; docs/performance.md, "Host waits").
  template <class Poll>
  void await(Poll done) const;
  // Submits the open batch and waits for it with |lock| released, so that other threads keep
  // recording meanwhile (a gradient bucket read back on DDP's communication thread while backward
  // goes on). Needs timeline_; |lock| holds mu_ again on return.
  void submit_and_wait_unlocked(std::unique_lock<std::mutex>& lock);
  VulkanDevice& dev_;
  VkPipelineStageFlags work_;  // the stages a barrier orders
  std::mutex mu_;
  // Signalled with the count of batches submitted so far (null without timeline semaphores).
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  std::uint64_t submitted_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::unique_ptr<Batch> open_;
  int dispatches_ = 0;
  std::deque<std::unique_ptr<Batch>> in_flight_;
  std::vector<std::unique_ptr<Batch>> spare_;
  std::vector<Access> pending_;  // accesses since the last barrier
  bool profiling_ = false;
  // Host waits poll first (await): on GPUs, not on CPU drivers (lavapipe), whose work runs on
  // the cores a polling thread would take.
  bool spin_;
  KernelTimes times_;
};

// Shader modules and compute pipelines, created on first use and kept; each pipeline's
// VkPipelineCache data is an entry of its own under TESSERA_CACHE_DIR, read when the pipeline is
// created and written when it was not there. Thread-safe.
class Pipelines {
 public:
  explicit Pipelines(VulkanDevice& device);
  ~Pipelines();
  // The pipeline of the embedded |shader|.spv (a portable kernel: NAME.tk) with specialization
  // constants 0..N-1 = |spec|.
  VkPipeline get(std::string_view shader, std::span<const std::int32_t> spec);
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  static constexpr int kBindings = 8;
  static constexpr int kPushWords = 32;

 private:
  // The cache entry of the pipeline |key| under TESSERA_CACHE_DIR (one a pipeline): its name, its
  // driver data if valid (else empty), and writing |cache|'s data as it; |name| is cache_name(key).
  std::string cache_name(const std::string& key) const;
  std::string load_cache(const std::string& key, const std::string& name) const;
  void save_cache(const std::string& key, const std::string& name, VkPipelineCache cache) const;
  // Logs the compiler's statistics of |pipeline| (at debug; VulkanDevice::pipeline_statistics).
  void log_statistics(const std::string& key, VkPipeline pipeline) const;
  VulkanDevice& dev_;
  std::mutex mu_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::string cache_prefix_;  // vulkan-VENDOR-DEVICE-UUID-DRIVER
  std::map<std::string, VkShaderModule, std::less<>> modules_;
  std::map<std::string, VkPipeline, std::less<>> pipelines_;
};

// Kernels of PTX modules through VK_NVX_binary_import: on NVIDIA GPUs of compute capability 9.0
// (Hopper), the f16 and bf16 GEMMs of ops_gemm.cpp's coop_gemm ("gemm_coopmat",
// "gemm_coopmat_bf16") run the Hopper kernel the OpenCL plugin runs
// (../common/nvidia/gemm_wgmma.cl: warpgroup products, which no Vulkan shader can express),
// compiled by clang at build time for the CUDA kernel ABI (../common/nvidia/ptx.cmake) and
// embedded as gemm_wgmma_BF16_V0.ptx, one module per operand type (BF16 1 or 0) and launch flags
// (V0); and the variants of portable kernels built as PTX too (NAME.tk_V0_V1_V2_V3.ptx: the f32
// GEMM's main ones, which NVIDIA's Vulkan compiler builds slower from SPIR-V) run those modules
// instead of their pipelines; and the f32 GEMM of a weight's gradient through cp.async
// ("gemm_ffma": ../common/nvidia/gemm_ffma.cl, gemm_ffma_V0.ptx), which has no SPIR-V form. The
// driver compiles a module when it is first used. A kernel takes the OpenCL kernel's parameters:
// eight 64-bit device addresses (the bindings, MemoryBlock::address + the allocation's offset; the
// element offsets stay in the words), the words as a struct of 32 ints, and a __local pointer it
// does not read (0). Thread-safe.
class CuKernels {
 public:
  // Throws BackendError where the device lacks the extension's entry points.
  explicit CuKernels(VulkanDevice& device);
  // Whether the plugin was built with the GEMM's modules (clang was found).
  static bool built();
  // The GEMM's module name for a launch of coop_gemm: "gemm_wgmma_1_3.ptx".
  static std::string gemm_module(bool bf16, std::int32_t v0);
  // The module name of the f32 GEMM through cp.async ("gemm_ffma", ops_gemm.cpp's ffma_gemm) for
  // flags |v0|: "gemm_ffma_9.ptx"; and whether the plugin has its modules.
  static std::string ffma_module(std::int32_t v0);
  static bool has_ffma();
  // A portable kernel's module name for variant |v|: "gemm.tk_128_128_4232_20.ptx".
  static std::string portable_module(std::string_view kernel, std::span<const std::int32_t> v);
  // Whether the plugin has modules of the portable kernel |kernel| ("gemm": gemm.tk_*.ptx).
  static bool has_portable(std::string_view kernel);
  // The entry point tk_main of the embedded module |name|, created on first use. Throws
  // BackendError naming the module and the driver's result where it is not embedded or the
  // driver refuses it (a GPU other than compute capability 9.0 refuses sm_90a code).
  VkCuFunctionNVX function(const std::string& name);
  // function(name) where the module is embedded, else VK_NULL_HANDLE (remembered: a launch of a
  // kernel with modules asks for its variant every time).
  VkCuFunctionNVX function_if_built(const std::string& name);
  PFN_vkCmdCuLaunchKernelNVX launch = nullptr;

 private:
  VulkanDevice& dev_;
  PFN_vkCreateCuModuleNVX create_module_ = nullptr;
  PFN_vkCreateCuFunctionNVX create_function_ = nullptr;
  std::mutex mu_;
  std::map<std::string, VkCuFunctionNVX, std::less<>> functions_;
};

// TESSERA_VULKAN_PTX: unset or 1 lets the GEMMs take the PTX kernels where they run
// (CuKernels), 0 keeps the 16-bit ones on cooperative matrix and the f32 ones on SPIR-V (for
// comparisons). Throws ConfigError for any other value (the plugin checks it when it loads, on
// every machine).
bool ptx_allowed();

using KernelTable = std::array<std::unique_ptr<Kernel>, kNumOps>;

// Runs the portable kernels (../common/portable.h) on one device; lives as long as the device.
class VulkanLauncher final : public common::Launcher {
 public:
  VulkanLauncher(VulkanDevice& device, common::GpuTraits traits);
  Device& device() override;
  const common::GpuTraits& traits() const override { return traits_; }
  void launch(const common::Launch& l) override;

 private:
  VulkanDevice& device_;
  common::GpuTraits traits_;
};

class VulkanDevice final : public Device {
 public:
  VulkanDevice(VkInstance instance, VkPhysicalDevice physical, int index);
  ~VulkanDevice() override;
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return allocator_; }
  Queue& queue() override { return *queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }
  // The kernel's answer, and no for a call with a tensor larger than the largest storage buffer
  // the device binds (max_buffer()), so that the fallback chain can take it.
  Support supports(const OpCall& call) const override;

  // For the plugin's own classes.
  const std::string& name() const { return id_; }  // "vulkan:0", known before bind()
  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkQueue vk_queue() const { return vk_queue_; }
  std::uint32_t queue_family() const { return family_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  MemoryPool& device_pool() { return *device_pool_; }
  MemoryPool& staging_pool() { return *staging_pool_; }
  VulkanQueue& vk_queue_object() { return *queue_; }
  Pipelines& pipelines() { return *pipelines_; }
  // The largest buffer a kernel can bind: the smaller of maxStorageBufferRange and
  // maxMemoryAllocationSize, and which of the two it is.
  VkDeviceSize max_buffer() const { return max_buffer_; }
  const char* max_buffer_limit() const { return max_buffer_limit_; }
  // The error for a buffer of |bytes| over max_buffer(): InvalidArgument, for a limit is not a
  // lack of memory ("vulkan:0 (llvmpipe) can not hold a 2.0 GiB buffer: its largest storage
  // buffer is 128 MiB (maxStorageBufferRange)").
  InvalidArgument buffer_limit_error(std::size_t bytes) const;
  PFN_vkCmdPushDescriptorSetKHR push_descriptor = nullptr;
  // Whether timeline semaphores were enabled (Vulkan 1.2's timelineSemaphore feature).
  bool timeline_semaphores() const { return timeline_; }
  // Valid bits of the compute queue's timestamps (0: it has none; kernel profiling needs them).
  std::uint32_t timestamp_bits() const { return timestamp_bits_; }
  // Whether pipelines capture the compiler's statistics for the log (VK_KHR_pipeline_executable_
  // properties, enabled at log level debug only).
  bool pipeline_statistics() const { return exec_stats_; }
  // The bf16 form of the matrix-unit kernel |name| (shaders/NAME.comp: "gemm_coopmat",
  // "attention_coopmat"), made when the device opened (empty: no bf16 matrix units).
  std::span<const std::uint32_t> coop_bf16_spirv(const std::string& name) const {
    const auto it = coop_bf16_spirv_.find(name);
    return it == coop_bf16_spirv_.end() ? std::span<const std::uint32_t>() : it->second;
  }
  // Free bytes of |heap| as the driver reports them (VK_EXT_memory_budget), or -1 when unknown.
  std::int64_t heap_budget(std::uint32_t heap) const;
  // The PTX kernels (the 16-bit GEMMs on Hopper), or null where they do not run here.
  CuKernels* cu_kernels() const { return cu_kernels_.get(); }

 private:
  std::string id_;
  VkPhysicalDevice physical_;
  VkPhysicalDeviceProperties props_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue vk_queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  bool budget_ext_ = false;
  bool timeline_ = false;
  bool storage16_ = false;  // storageBuffer16BitAccess enabled
  bool coop_f16_ = false;   // VK_NV_cooperative_matrix enabled for f16 GEMMs
  // The matrix-unit kernels' bf16 SPIR-V (spirv_bf16.h) by name, where VK_KHR_cooperative_matrix
  // with bf16 is enabled for them; empty elsewhere.
  std::map<std::string, std::vector<std::uint32_t>> coop_bf16_spirv_;
  std::uint32_t timestamp_bits_ = 0;
  bool exec_stats_ = false;
  VkDeviceSize max_buffer_ = 0;
  const char* max_buffer_limit_ = "maxStorageBufferRange";
  DeviceInfo info_;
  VulkanAllocator allocator_{*this};
  std::unique_ptr<MemoryPool> device_pool_, staging_pool_;
  std::unique_ptr<CuKernels> cu_kernels_;
  std::unique_ptr<VulkanQueue> queue_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<VulkanLauncher> launcher_;
  KernelTable kernels_;
};

}  // namespace tessera::vulkan
