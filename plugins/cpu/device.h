// The CPU device: host memory, a synchronous queue, OpenBLAS and a thread pool.
#pragma once

#include "kernels.h"
#include "tessera/device.h"
#include "tessera/host.h"

namespace tessera::cpu {

class CpuDevice final : public Device {
 public:
  CpuDevice();
  const DeviceInfo& info() const override { return info_; }
  Allocator& allocator() override { return allocator_; }
  Queue& queue() override { return queue_; }
  const Kernel* kernel(OpId op) const override {
    return kernels_[static_cast<std::size_t>(op)].get();
  }

 private:
  DeviceInfo info_;
  HostAllocator allocator_{"cpu:0"};
  HostQueue queue_;
  ThreadPool pool_;
  ScratchBuffers scratch_;
  Context ctx_;
  KernelTable kernels_;
};

}  // namespace tessera::cpu
