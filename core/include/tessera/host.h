// Host memory building blocks for plugins whose devices use ordinary host memory (the CPU
// plugin, test doubles, simple out-of-tree plugins).
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/queue.h"

namespace tessera {

// 64-byte aligned host memory; host_ptr() is always set.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(std::size_t bytes);  // throws std::bad_alloc
  ~HostBuffer() override;
  std::size_t size() const override { return size_; }
  void* host_ptr() const override { return data_; }

 private:
  void* data_;
  std::size_t size_;
};

// The machine's memory from /proc/meminfo (MemTotal, MemAvailable).
MemoryInfo host_memory_info();

// Allocates HostBuffers; memory() reports the machine's RAM (MemTotal, MemAvailable).
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(std::string device_id) : device_id_(std::move(device_id)) {}
  // Throws OutOfMemory naming the device for a request larger than the machine's RAM (which the
  // kernel's overcommit could not back either) or one the C library refuses. Thread-safe.
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override;
  MemoryInfo memory() const override;

 private:
  std::string device_id_;
};

// A synchronous queue over host-visible buffers: every call completes before it returns. Made
// with |times_kernels|, it profiles (tessera/profiler.h): while profiling() is on, the plugin's
// kernels, which run synchronously, report their wall time through record() (the cpu plugin's
// do, per op). Without, start_profiling() says it can not.
class HostQueue final : public Queue {
 public:
  explicit HostQueue(bool times_kernels = false) : times_kernels_(times_kernels) {}
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
            std::size_t bytes) override;
  void synchronize() override {}
  bool start_profiling() override;
  std::vector<KernelTime> stop_profiling() override;
  bool profiling() const { return profiling_.load(std::memory_order_relaxed); }
  // Adds one launch of |name| that took |seconds|. Thread-safe.
  void record(std::string_view name, double seconds);

 private:
  bool times_kernels_;
  std::atomic<bool> profiling_{false};
  std::mutex mu_;
  KernelTimes times_;
};

}  // namespace tessera
