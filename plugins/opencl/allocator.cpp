#include <cstdlib>

#include "../common/limits.h"
#include "opencl.h"

namespace tessera::opencl {
namespace {

constexpr std::size_t kHostAlignment = 4096;  // PoCL and integrated GPUs use such memory in place

}  // namespace

OpenclBuffer::~OpenclBuffer() {
  owner_.release(size_);
  clReleaseMemObject(mem_);  // OpenCL destroys it once the work queued on it has finished
  if (host_) owner_.queue().hold_until_queued_work_done(host_);
}

OpenclAllocator::OpenclAllocator(cl_context context, cl_device_id device, std::string id,
                                 std::string name, bool host_memory, OpenclQueue& queue)
    : context_(context),
      queue_(queue),
      id_(std::move(id)),
      name_(std::move(name)),
      host_memory_(host_memory),
      total_(device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE)),
      max_alloc_(device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE)) {}

std::unique_ptr<Buffer> OpenclAllocator::allocate(std::size_t bytes) {
  const std::size_t size = (bytes + 255) / 256 * 256;
  {
    std::lock_guard lock(mu_);
    // OpenCL allocates on first use, so a request the device can not hold is refused here rather
    // than failing a kernel later.
    if (used_ + size > total_) throw OutOfMemory(id_, bytes, total_ - used_);
    if (size > max_alloc_)
      throw common::buffer_limit_error(id_, name_, size, max_alloc_,
                                       "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    used_ += size;
  }
  void* host = nullptr;
  cl_int err = CL_SUCCESS;
  cl_mem mem = nullptr;
  if (host_memory_) {
    host = std::aligned_alloc(kHostAlignment,
                              (size + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
    if (host)
      mem = clCreateBuffer(context_, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, host, &err);
  } else {
    mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
  }
  if (!mem) {
    std::free(host);
    release(size);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
        err == CL_OUT_OF_HOST_MEMORY || err == CL_SUCCESS || err == CL_INVALID_BUFFER_SIZE)
      throw OutOfMemory(id_, bytes, memory().free);
    check(err, "clCreateBuffer", id_);
  }
  return std::make_unique<OpenclBuffer>(mem, size, host, *this);
}

void OpenclAllocator::release(std::size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  used_ -= bytes;
}

MemoryInfo OpenclAllocator::memory() const {
  std::lock_guard lock(mu_);
  return {total_, total_ - used_};
}

}  // namespace tessera::opencl
