#include <cstring>
#include <vector>

#include "opencl.h"

namespace tessera::opencl {
namespace {

cl_mem mem_of(const Buffer& b) {
  return static_cast<const OpenclBuffer&>(b).mem();
}

void CL_CALLBACK free_staging(cl_event, cl_int, void* staging) {
  delete static_cast<std::vector<std::byte>*>(staging);
}

}  // namespace

OpenclQueue::OpenclQueue(cl_context context, cl_device_id device, std::string id)
    : id_(std::move(id)) {
  cl_int err = CL_SUCCESS;
  queue_ = clCreateCommandQueue(context, device, 0, &err);  // in order
  check(err, "clCreateCommandQueue", id_);
}

OpenclQueue::~OpenclQueue() {
  clReleaseCommandQueue(queue_);
}

void OpenclQueue::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  // The caller may reuse |src| at once: the bytes go into a staging copy that the command's
  // completion frees, so the host does not wait for the device.
  auto* staging = new std::vector<std::byte>(bytes);
  std::memcpy(staging->data(), src, bytes);
  cl_event done = nullptr;
  const cl_int err = clEnqueueWriteBuffer(queue_, mem_of(dst), CL_FALSE, offset, bytes,
                                          staging->data(), 0, nullptr, &done);
  if (err != CL_SUCCESS) {
    delete staging;
    check(err, "clEnqueueWriteBuffer", id_);
  }
  if (clSetEventCallback(done, CL_COMPLETE, free_staging, staging) != CL_SUCCESS) {
    clWaitForEvents(1, &done);
    delete staging;
  }
  clReleaseEvent(done);
}

void OpenclQueue::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  check(clEnqueueReadBuffer(queue_, mem_of(src), CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
        "clEnqueueReadBuffer", id_);
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
}

}  // namespace tessera::opencl
