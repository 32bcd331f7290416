#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "opencl.h"

namespace tessera::opencl {
namespace {

cl_mem mem_of(const Buffer& b) {
  return static_cast<const OpenclBuffer&>(b).mem();
}

// Host bytes that queued commands may still read stay alive up to this much; past it, write()
// waits for the oldest commands to finish before it stages more.
constexpr std::size_t kMaxHeldBytes = std::size_t{256} << 20;

}  // namespace

OpenclQueue::OpenclQueue(cl_context context, cl_device_id device, std::string id)
    : id_(std::move(id)) {
  cl_int err = CL_SUCCESS;
  // In order; profiling enabled so that start_profiling() can time kernels (their events are
  // requested only while it is on).
  queue_ = clCreateCommandQueue(context, device, CL_QUEUE_PROFILING_ENABLE, &err);
  check(err, "clCreateCommandQueue", id_);
}

OpenclQueue::~OpenclQueue() {
  clFinish(queue_);
  std::lock_guard lock(mu_);
  for (auto& [name, e] : timed_) clReleaseEvent(e);
  timed_.clear();
  for (const Held& h : held_) {
    clReleaseEvent(h.done);
    std::free(h.memory);
  }
  held_.clear();
  clReleaseCommandQueue(queue_);
}

void OpenclQueue::hold_until_done(void* memory, std::size_t bytes, cl_event done) {
  std::unique_lock lock(mu_);
  held_.push_back({done, memory, bytes});
  held_bytes_ += bytes;
  release_finished(lock, kMaxHeldBytes);
}

void OpenclQueue::hold_until_queued_work_done(void* memory) noexcept {
  cl_event marker = nullptr;
  if (clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &marker) == CL_SUCCESS) {
    try {
      hold_until_done(memory, 0, marker);
      return;
    } catch (...) {
      clReleaseEvent(marker);
    }
  }
  // Without a marker (or room to hold it) the only safe point is the end of all queued work.
  clFinish(queue_);
  std::free(memory);
}

void OpenclQueue::release_finished(std::unique_lock<std::mutex>& lock, std::size_t keep_bytes) {
  (void)lock;
  // The queue is in order, so commands finish in the order they were held: stop at the first one
  // still running, unless more than |keep_bytes| is held, then wait for it.
  while (!held_.empty()) {
    Held& h = held_.front();
    cl_int status = CL_QUEUED;
    if (clGetEventInfo(h.done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                       nullptr) != CL_SUCCESS)
      status = CL_COMPLETE;      // an event the driver no longer knows can not be waited for
    if (status > CL_COMPLETE) {  // queued, submitted or running (an error status is < 0: done)
      if (held_bytes_ <= keep_bytes) return;
      clWaitForEvents(1, &h.done);
    }
    clReleaseEvent(h.done);
    std::free(h.memory);
    held_bytes_ -= h.bytes;
    held_.pop_front();
  }
}

void OpenclQueue::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  // The caller may reuse |src| at once: the bytes go into a staging copy that stays held until the
  // write has finished. Completion is polled here and at synchronisation points, never through an
  // event callback: NVIDIA's OpenCL deadlocked between its callback thread and a blocking call of
  // the host thread (training on opencl:0 of an H100 hung within a few epochs).
  void* staging = std::malloc(bytes);
  if (!staging) throw OutOfMemory(id_ + " (host staging memory)", bytes, 0);
  std::memcpy(staging, src, bytes);
  cl_event done = nullptr;
  const cl_int err = clEnqueueWriteBuffer(queue_, mem_of(dst), CL_FALSE, offset, bytes, staging, 0,
                                          nullptr, &done);
  if (err != CL_SUCCESS) {
    std::free(staging);
    check(err, "clEnqueueWriteBuffer", id_);
  }
  hold_until_done(staging, bytes, done);
}

void OpenclQueue::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  check(clEnqueueReadBuffer(queue_, mem_of(src), CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
        "clEnqueueReadBuffer", id_);
  std::unique_lock lock(mu_);
  release_finished(lock, kMaxHeldBytes);
}

void OpenclQueue::copy(const Buffer& src, std::size_t src_offset, Buffer& dst,
                       std::size_t dst_offset, std::size_t bytes) {
  if (bytes == 0) return;
  check(clEnqueueCopyBuffer(queue_, mem_of(src), mem_of(dst), src_offset, dst_offset, bytes, 0,
                            nullptr, nullptr),
        "clEnqueueCopyBuffer", id_);
}

void OpenclQueue::synchronize() {
  check(clFinish(queue_), "clFinish", id_);
  std::unique_lock lock(mu_);
  release_finished(lock, 0);
}

void OpenclQueue::enqueue_kernel(std::string_view name, cl_kernel kernel, const std::size_t* global,
                                 const std::size_t* local) {
  const bool timed = profiling_.load(std::memory_order_relaxed);
  cl_event done = nullptr;
  check(clEnqueueNDRangeKernel(queue_, kernel, 2, nullptr, global, local, 0, nullptr,
                               timed ? &done : nullptr),
        "clEnqueueNDRangeKernel", id_);
  if (!timed) return;
  std::lock_guard lock(mu_);
  timed_.emplace_back(std::string(name), done);
  if (timed_.size() > 1024) collect_timed(false);  // bounded: finished events are folded in
}

void OpenclQueue::collect_timed(bool wait) {
  while (!timed_.empty()) {
    auto& [name, e] = timed_.front();
    if (wait) {
      clWaitForEvents(1, &e);
    } else {
      cl_int status = CL_QUEUED;
      clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
      if (status > CL_COMPLETE) break;
    }
    cl_ulong start = 0, end = 0;
    if (clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr) ==
            CL_SUCCESS &&
        clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) ==
            CL_SUCCESS &&
        end >= start) {
      times_.add(name, static_cast<double>(end - start) * 1e-9);
    }
    clReleaseEvent(e);
    timed_.pop_front();
  }
}

bool OpenclQueue::start_profiling() {
  synchronize();  // what was enqueued before is not timed
  std::lock_guard lock(mu_);
  collect_timed(true);
  times_.clear();
  profiling_ = true;
  return true;
}

std::vector<KernelTime> OpenclQueue::stop_profiling() {
  profiling_ = false;
  synchronize();
  std::lock_guard lock(mu_);
  collect_timed(true);
  return times_.take();
}

}  // namespace tessera::opencl
