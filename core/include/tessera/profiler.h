// Kernel profiling: how long each kernel ran on a device, summed per kernel (the device-time
// columns of torch.profiler's key_averages() table). Used by `tessera-bench --profile`.
//
//   tessera::Profiler prof(device);        // times every kernel enqueued on |device| from now
//   ... ops on device ...
//   const auto times = prof.stop();        // waits for that work; the longest total first
//   std::cout << tessera::format_kernel_times(times);
//
// The built-in plugins all time their kernels (docs/performance.md says how each measures: the
// GPU plugins on the device, the cpu plugin each op's wall time); a device whose queue can not,
// an out-of-tree plugin's, makes Profiler's constructor throw UnsupportedOperation. One Profiler
// per device at a time: a second one restarts the recording.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/queue.h"

namespace tessera {

class Profiler {
 public:
  // Starts timing the kernels of |device|; throws UnsupportedOperation where its queue can not.
  explicit Profiler(Device& device);
  // Stops the recording (and drops it) if stop() was not called.
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Waits for the work enqueued so far, stops timing, and returns the times per kernel, the
  // longest total first. Throws Error if called twice.
  std::vector<KernelTime> stop();

 private:
  Device* device_;
  bool running_ = true;
};

// A table of |times|: kernel, calls, total ms, mean us per call, share of the total.
std::string format_kernel_times(std::span<const KernelTime> times);

}  // namespace tessera
