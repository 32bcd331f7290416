// Queue: ordered, possibly asynchronous work on one device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/buffer.h"

namespace tessera {

// The device time of one kernel, summed over its launches (tessera/profiler.h).
struct KernelTime {
  std::string name;        // the kernel: a portable kernel's NAME.tk stem (GPUs), an op (cpu)
  std::int64_t calls = 0;  // launches recorded
  double seconds = 0;      // device time, all launches together
};

// Kernel times summed per name, for a queue that profiles: add() each launch; take() returns the
// sums, the longest total first, and leaves it empty. Not thread-safe (the queue's lock guards it).
class KernelTimes {
 public:
  void add(std::string_view name, double seconds);
  std::vector<KernelTime> take();
  void clear() { by_name_.clear(); }

 private:
  std::map<std::string, KernelTime, std::less<>> by_name_;
};

// Every operation is ordered after all work enqueued earlier on the same queue. Only read() and
// synchronize() wait for the device; everything else may return before the device has run it.
// All methods are thread-safe. Failures throw BackendError (or OutOfMemory) and leave the queue
// usable.
class Queue {
 public:
  virtual ~Queue() = default;

  // Copies |bytes| from host memory |src| into |dst| at byte |offset|. |src| may be reused as
  // soon as the call returns (the queue stages or waits as needed).
  virtual void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) = 0;

  // Copies |bytes| of |src| at byte |offset| into host memory |dst|. Waits for earlier work;
  // the bytes are in |dst| when the call returns.
  virtual void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) = 0;

  // Copies |bytes| between two buffers of this queue's device.
  virtual void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                    std::size_t bytes) = 0;

  // Blocks until all work enqueued so far has finished.
  virtual void synchronize() = 0;

  // Kernel profiling, for tessera::Profiler (tessera/profiler.h); a backend that can not time
  // kernels keeps these defaults. start_profiling() drops what was recorded and times every
  // kernel enqueued from now on; false: this queue can not. stop_profiling() waits for the work
  // enqueued so far, stops timing, and returns the times per kernel name, the longest total
  // first. How a backend measures is its own (docs/performance.md, "Profiling kernels").
  virtual bool start_profiling() { return false; }
  virtual std::vector<KernelTime> stop_profiling() { return {}; }
};

}  // namespace tessera
