#include "tessera/host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "tessera/errors.h"

namespace tessera {

HostBuffer::HostBuffer(std::size_t bytes) : size_(bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data_) throw std::bad_alloc();
}

HostBuffer::~HostBuffer() {
  std::free(data_);
}

std::unique_ptr<Buffer> HostAllocator::allocate(std::size_t bytes) {
  // Asked before malloc: a size no machine here holds is an answer, not a request to the C
  // library (whose answer differs: null, or an abort under AddressSanitizer).
  static const std::size_t total = host_memory_info().total;  // read once (0: unknown)
  if (total > 0 && bytes > total) throw OutOfMemory(device_id_, bytes, memory().free);
  try {
    return std::make_unique<HostBuffer>(bytes);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(device_id_, bytes, memory().free);
  }
}

MemoryInfo HostAllocator::memory() const {
  return host_memory_info();
}

MemoryInfo host_memory_info() {
  MemoryInfo info;
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    if (key == "MemTotal:") info.total = kib * 1024;
    if (key == "MemAvailable:") info.free = kib * 1024;
    std::getline(in, unit);
  }
  return info;
}

void HostQueue::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  std::memcpy(static_cast<std::byte*>(dst.host_ptr()) + offset, src, bytes);
}

void HostQueue::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  std::memcpy(dst, static_cast<const std::byte*>(src.host_ptr()) + offset, bytes);
}

void HostQueue::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                     std::size_t bytes) {
  std::memmove(static_cast<std::byte*>(dst.host_ptr()) + dst_offset,
               static_cast<const std::byte*>(src.host_ptr()) + src_offset, bytes);
}

bool HostQueue::start_profiling() {
  if (!times_kernels_) return false;
  std::lock_guard lock(mu_);
  times_.clear();
  profiling_ = true;
  return true;
}

std::vector<KernelTime> HostQueue::stop_profiling() {
  std::lock_guard lock(mu_);
  profiling_ = false;
  return times_.take();
}

void HostQueue::record(std::string_view name, double seconds) {
  std::lock_guard lock(mu_);
  if (!profiling_) return;
  times_.add(name, seconds);
}

}  // namespace tessera
