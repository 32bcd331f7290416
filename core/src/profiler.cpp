#include "tessera/profiler.h"

#include <algorithm>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera {

Profiler::Profiler(Device& device) : device_(&device) {
  if (!device.queue().start_profiling())
    throw UnsupportedOperation(fmt::format(
        "{} can not time its kernels: its plugin's queue does not implement start_profiling()",
        device.id()));
}

Profiler::~Profiler() {
  if (!running_) return;
  try {
    (void)device_->queue().stop_profiling();
  } catch (...) {  // a destructor reports nothing; the queue's next call reports its errors
  }
}

std::vector<KernelTime> Profiler::stop() {
  if (!running_) throw Error("Profiler::stop() was called twice");
  running_ = false;
  return device_->queue().stop_profiling();
}

void KernelTimes::add(std::string_view name, double seconds) {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    it = by_name_.emplace(std::string(name), KernelTime{std::string(name)}).first;
  it->second.calls += 1;
  it->second.seconds += seconds;
}

std::vector<KernelTime> KernelTimes::take() {
  std::vector<KernelTime> out;
  for (auto& [name, t] : by_name_) out.push_back(std::move(t));
  by_name_.clear();
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

std::string format_kernel_times(std::span<const KernelTime> times) {
  double total = 0;
  std::size_t width = 6;
  for (const KernelTime& t : times) {
    total += t.seconds;
    width = std::max(width, t.name.size());
  }
  std::string out = fmt::format("{:<{}}  {:>8}  {:>11}  {:>11}  {:>6}\n", "kernel", width, "calls",
                                "total ms", "mean us", "share");
  for (const KernelTime& t : times) {
    const double mean = t.calls > 0 ? t.seconds / static_cast<double>(t.calls) : 0.0;
    out += fmt::format("{:<{}}  {:>8}  {:>11.3f}  {:>11.2f}  {:>5.1f}%\n", t.name, width, t.calls,
                       t.seconds * 1e3, mean * 1e6, total > 0 ? 100.0 * t.seconds / total : 0.0);
  }
  out += fmt::format("{:<{}}  {:>8}  {:>11.3f}\n", "all", width, "", total * 1e3);
  return out;
}

}  // namespace tessera
