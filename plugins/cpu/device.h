// The CPU device: host memory, a synchronous queue, a GEMM library (blas.h) and a thread pool.
#pragma once

#include "kernels.h"
#include "tessera/device.h"
#include "tessera/host.h"

namespace tessera::cpu {

struct Threads;

class CpuDevice final : public Device {
 public:
  // Throws ConfigError when TESSERA_CPU_THREADS or TESSERA_CPU_GEMM is malformed (the plugin then
  // reports TESSERA_PLUGIN_CREATE_CONFIG_ERROR, and no device is chosen), std::runtime_error when
  // no GEMM library loads (the plugin then reports that reason).
  CpuDevice();
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return allocator_; }
  Queue& queue() override { return queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }

 private:
  explicit CpuDevice(Threads threads);
  DeviceInfo info_;
  HostAllocator allocator_{"cpu:0"};
  HostQueue queue_{true};  // profiles: the kernels time themselves (CpuKernel)
  ThreadPool pool_;
  ScratchBuffers scratch_;
  Context ctx_;
  KernelTable kernels_;
};

}  // namespace tessera::cpu
