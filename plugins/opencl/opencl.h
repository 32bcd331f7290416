// The OpenCL plugin: every device of every platform (through the ICD loader) as opencl:N.
// One in-order command queue per device; kernels are OpenCL C from kernels/, built on first use
// and cached as program binaries under TESSERA_CACHE_DIR.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../common/portable.h"
#include "tessera/device.h"
#include "tessera/errors.h"

namespace tessera::opencl {

// "CL_OUT_OF_RESOURCES (-5)".
std::string error_name(cl_int err);

// Throws BackendError "what on DEVICE failed: CL_... (-N)" unless err is CL_SUCCESS.
void check(cl_int err, std::string_view what, std::string_view device);

// An OpenCL string or scalar device property.
std::string device_string(cl_device_id d, cl_device_info what);
template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof v, &v, nullptr);
  return v;
}

// The device's in-order queue. write() stages the bytes in a host copy and returns; read() and
// synchronize() wait. Host memory that queued commands still use (staging copies, the memory
// behind host-memory buffers being destroyed) is held with the event of the last command using
// it and freed once that event has completed, which the queue polls at its next write, read or
// synchronize. No OpenCL event or destructor callback is used anywhere: driver callback threads
// deadlocked against blocking calls on NVIDIA. Thread-safe.
class OpenclQueue final : public Queue {
 public:
  OpenclQueue(cl_context context, cl_device_id device, std::string id);
  // Waits for all queued work, then frees what is held.
  ~OpenclQueue() override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
            std::size_t bytes) override;
  void synchronize() override;
  // Kernel profiling: every kernel enqueued through enqueue_kernel() keeps its event, and its time
  // is CL_PROFILING_COMMAND_END - _START (docs/performance.md, "Profiling kernels").
  bool start_profiling() override;
  std::vector<KernelTime> stop_profiling() override;
  // Enqueues |kernel|, the kernel |name| (for profiling), over |global| work-items in groups of
  // |local| (two dimensions). The caller holds the launch lock for |kernel|'s arguments.
  void enqueue_kernel(std::string_view name, cl_kernel kernel, const std::size_t* global,
                      const std::size_t* local);
  // Takes |memory| (from std::malloc or std::aligned_alloc) and frees it once all work queued so
  // far has finished. Never throws (without a marker event it waits for the queue instead).
  void hold_until_queued_work_done(void* memory) noexcept;
  cl_command_queue handle() const { return queue_; }
  const std::string& id() const { return id_; }

 private:
  struct Held {
    cl_event done;      // the last command that uses |memory|
    void* memory;       // freed with std::free
    std::size_t bytes;  // counted against the staging bound (0: not staging)
  };
  // Takes |memory| and its event; may wait for the oldest work when too much staging is held.
  void hold_until_done(void* memory, std::size_t bytes, cl_event done);
  // Frees what finished work held; waits while more than |keep_bytes| is held. |lock| holds mu_.
  void release_finished(std::unique_lock<std::mutex>& lock, std::size_t keep_bytes);
  // Adds the timed kernels that have finished to times_ (all of them, waiting, if |wait|); mu_
  // held.
  void collect_timed(bool wait);

  cl_command_queue queue_;
  std::string id_;
  std::mutex mu_;
  std::deque<Held> held_;
  std::size_t held_bytes_ = 0;
  std::atomic<bool> profiling_{false};
  std::deque<std::pair<std::string, cl_event>> timed_;  // kernels not yet in times_
  KernelTimes times_;
};

// One cl_mem. |host| is set when the memory is the host's own (CL_MEM_USE_HOST_PTR on a device
// that shares host memory), and then host_ptr() returns it. Releasing a cl_mem with work queued
// on it is safe: OpenCL keeps it alive until that work is done, and the queue frees the host
// memory behind it only after all work queued before the release has finished.
class OpenclBuffer final : public Buffer {
 public:
  OpenclBuffer(cl_mem mem, std::size_t size, void* host, class OpenclAllocator& owner)
      : mem_(mem), size_(size), host_(host), owner_(owner) {}
  ~OpenclBuffer() override;
  std::size_t size() const override { return size_; }
  void* host_ptr() const override { return host_; }
  cl_mem mem() const { return mem_; }

 private:
  cl_mem mem_;
  std::size_t size_;
  void* host_;
  OpenclAllocator& owner_;
};

// clCreateBuffer per allocation (the core's caching allocator sits above). OpenCL allocates
// lazily, so the allocator counts what it handed out against the device's global memory and
// refuses with OutOfMemory before the driver would fail later, at first use.
class OpenclAllocator final : public Allocator {
 public:
  // |name| is the device's name, for the limit error. Host memory behind destroyed buffers is
  // freed through |queue| once the work queued on it has finished.
  OpenclAllocator(cl_context context, cl_device_id device, std::string id, std::string name,
                  bool host_memory, OpenclQueue& queue);
  // Throws OutOfMemory when the device's memory can not hold |bytes| more, InvalidArgument
  // (common::buffer_limit_error) when |bytes| is over CL_DEVICE_MAX_MEM_ALLOC_SIZE.
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override;
  MemoryInfo memory() const override;
  void release(std::size_t bytes) noexcept;
  std::size_t max_alloc() const { return max_alloc_; }
  OpenclQueue& queue() const { return queue_; }

 private:
  cl_context context_;
  OpenclQueue& queue_;  // frees host memory once the work queued on it has finished
  std::string id_;
  std::string name_;
  bool host_memory_;       // allocate host memory and let the device use it in place
  std::size_t total_;      // CL_DEVICE_GLOBAL_MEM_SIZE
  std::size_t max_alloc_;  // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  mutable std::mutex mu_;
  std::size_t used_ = 0;
};

// Programs built from the embedded kernels/*.cl on first use, one per (file, options), with their
// binaries cached on disk; kernels created once per name. Thread-safe.
class Programs {
 public:
  Programs(cl_context context, cl_device_id device, std::string id, std::string cache_key);
  ~Programs();
  // How a kernel's PTX is finished on NVIDIA devices. sm_90a: the file is compiled with
  // TK_WGMMA_COMMENTED defined, which writes the instructions that only the sm_90a target has as
  // PTX comments marked "//@"; the marks are removed from the PTX the driver returns, its target
  // becomes sm_90a, and that PTX is built as the program's binary (NVIDIA's OpenCL compiler emits
  // sm_90 PTX, whose assembler refuses wgmma). Throws BackendError where the driver's binary is not
  // such PTX.
  enum class Retarget { none, sm_90a };
  // The kernel |name| of kernels/|file| built with |options| ("-DTM=128 ..."). Throws
  // BackendError with the compiler's log when the build fails.
  cl_kernel kernel(std::string_view file, std::string_view name, const std::string& options = {},
                   Retarget retarget = Retarget::none);
  // The kernel |name| of the embedded PTX module |module| (clang's build of one of
  // ../common/nvidia's kernels for NVIDIA's OpenCL kernel ABI: ../common/nvidia/ptx.cmake), built
  // by the driver as the program's binary (not cached on disk: the driver's build of PTX is its
  // assembler alone). Throws BackendError where the plugin has no such module or the driver refuses
  // it (a device or driver that does not take that PTX).
  cl_kernel ptx_kernel(std::string_view module, std::string_view name);

 private:
  cl_program build(std::string_view file, const std::string& options, Retarget retarget);
  cl_program retarget_sm_90a(cl_program compiled, std::string_view file,
                             const std::string& options);
  // The kernel |name| of |program|, kept under |kernel_key|; called with mu_ held.
  cl_kernel create_kernel(cl_program program, const std::string& kernel_key, std::string_view name);
  // A program of |ptx| built as its binary with |options|; |what| names it in errors.
  cl_program build_ptx(const std::string& ptx, const std::string& what, const std::string& options);
  cl_context context_;
  cl_device_id device_;
  std::string id_;
  std::string cache_key_;  // device name, driver and platform versions
  std::string verbose_;    // compiler options that report registers, at log level debug
  std::mutex mu_;
  std::map<std::string, cl_program, std::less<>> programs_;
  std::map<std::string, cl_kernel, std::less<>> kernels_;
};

// The plugin's own 16-bit GEMM on NVIDIA's tensor cores (../common/nvidia/gemm_mma.cl: mma.sync,
// ldmatrix and cp.async in inline PTX), and its build options for the matrix-unit GEMM's V0 flags
// (../common/ops_gemm.cpp) and operand type. The device offers it (GpuTraits::coop_f16 and
// coop_bf16) where it builds when the device opens: NVIDIA devices whose compiler takes the PTX
// (compute capability 8.0 or newer).
inline constexpr std::string_view kMmaGemm = "gemm_mma.cl";
std::string mma_gemm_options(std::int32_t v0, bool bf16);

// The same launches on Hopper's warpgroup products (../common/nvidia/gemm_wgmma.cl: wgmma,
// cp.async; built with Programs::Retarget::sm_90a): taken instead of kMmaGemm on NVIDIA devices of
// compute capability 9.0 where it builds when the device opens (OpenclLauncher's wgmma flag).
inline constexpr std::string_view kWgmmaGemm = "gemm_wgmma.cl";
// TESSERA_OPENCL_WGMMA: unset or 1, kWgmmaGemm where it builds; 0, kMmaGemm (for comparisons).
// Throws ConfigError for any other value; the plugin reads it when it loads.
bool wgmma_allowed();

// The plugin's own f32 GEMM on NVIDIA's tensor cores (../common/nvidia/gemm_tf32.cl: TF32 products
// through inline PTX) for float32_matmul_precision() high and medium, and its build options for the
// launch's V0 (flags) and V1 (products: 3 or 1). Offered (GpuTraits::tf32_gemm) where the 16-bit
// one builds when the device opens (the same compute capability); built when first launched.
inline constexpr std::string_view kTf32Gemm = "gemm_tf32.cl";
std::string tf32_gemm_options(std::int32_t v0, std::int32_t v1);

// The plugin's f32 GEMM through cp.async for a stored [K, M] and b [K, N]
// (../common/nvidia/gemm_ffma.cl) for the launch's V0 (1, or 9 with a bias): clang's PTX module
// gemm_ffma_V0.ptx (ffma_ptx_module; K slices of 16, three in flight, in all the 48 KiB NVIDIA's
// OpenCL gives a work-group) where the plugin was built with it and the driver takes it, else
// NVIDIA's compiler's build of the source with ffma_gemm_options (K slices of 8, four in flight,
// about 8% slower than the module; with 16, three, that compiler spills and still runs 5-6%
// slower: on the H200, docs/bench/h200-opencl-ffma-ptx.txt). Either form takes no __local argument.
// Offered (GpuTraits::ffma_gemm) where the 16-bit GEMM builds when the device opens (the same
// compute capability, 8.0, for cp.async) and TESSERA_GEMM_FFMA allows; built when first launched.
inline constexpr std::string_view kFfmaGemm = "gemm_ffma.cl";
std::string ffma_ptx_module(std::int32_t v0);
std::string ffma_gemm_options(std::int32_t v0);

// What every OpenCL kernel launch needs.
struct Context {
  Programs& programs;
  OpenclQueue& queue;
  std::mutex& launch_mu;  // clSetKernelArg + enqueue of one cl_kernel are not thread-safe
};

using KernelTable = std::array<std::unique_ptr<Kernel>, kNumOps>;

// Runs the portable kernels (../common/portable.h) on one device; lives as long as the device.
class OpenclLauncher final : public common::Launcher {
 public:
  // |wgmma|: the matrix-unit GEMM launches run kWgmmaGemm (else kMmaGemm).
  OpenclLauncher(Device& device, Context& ctx, common::GpuTraits traits, bool wgmma);
  Device& device() override { return device_; }
  const common::GpuTraits& traits() const override { return traits_; }
  void launch(const common::Launch& l) override;

 private:
  // gemm_ffma's kernel for |v0| (kFfmaGemm says which form); called with ctx_.launch_mu held.
  cl_kernel ffma_kernel(std::int32_t v0);
  Device& device_;
  Context& ctx_;
  common::GpuTraits traits_;
  bool wgmma_;
  bool ffma_ptx_ = true;  // until a PTX module is missing or refused: then the source, always
};

class OpenclDevice final : public Device {
 public:
  OpenclDevice(cl_platform_id platform, cl_device_id device, int index);
  ~OpenclDevice() override;
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return *allocator_; }
  Queue& queue() override { return *queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }
  // The kernel's answer, and no for a call with a tensor over CL_DEVICE_MAX_MEM_ALLOC_SIZE, so
  // that the fallback chain can take it.
  Support supports(const OpCall& call) const override;

 private:
  cl_context context_ = nullptr;
  DeviceInfo info_;
  std::unique_ptr<OpenclQueue> queue_;  // before allocator_, which refers to it
  std::unique_ptr<OpenclAllocator> allocator_;
  std::unique_ptr<Programs> programs_;
  std::mutex launch_mu_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<OpenclLauncher> launcher_;
  KernelTable kernels_;
};

}  // namespace tessera::opencl
