#include "tessera/caching_allocator.h"

#include <bit>

#include "tessera/errors.h"
#include "tessera/log.h"

namespace tessera {

Block& Block::operator=(Block&& o) noexcept {
  if (this != &o) {
    release();
    buffer_ = std::move(o.buffer_);
    size_ = o.size_;
    owner_ = o.owner_;
    o.owner_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void Block::release() noexcept {
  if (buffer_ && owner_) owner_->give_back(std::move(buffer_), size_);
  buffer_.reset();
  owner_ = nullptr;
}

CachingAllocator::CachingAllocator(Allocator& raw, std::string device_id)
    : raw_(raw), device_id_(std::move(device_id)) {}

CachingAllocator::~CachingAllocator() {
  empty_cache();
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 4096) return (bytes + 511) / 512 * 512;
  const std::size_t pow2 = std::bit_floor(bytes);
  const std::size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

Block CachingAllocator::allocate(std::size_t bytes) {
  // No device holds 2^62 bytes; refusing here also keeps round_size from wrapping.
  if (bytes > (std::size_t{1} << 62)) throw OutOfMemory(device_id_, bytes, raw_.memory().free);
  const std::size_t size = round_size(bytes);
  Block block;
  block.size_ = size;
  block.owner_ = this;
  {
    std::lock_guard lock(mu_);
    ++stats_.requests;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      block.buffer_ = std::move(it->second.back());
      it->second.pop_back();
      ++stats_.cache_hits;
      stats_.allocated += size;
      stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
      return block;
    }
  }
  try {
    block.buffer_ = raw_.allocate(size);
  } catch (const OutOfMemory&) {
    log().debug("{}: out of memory for {}; emptying the cache and retrying", device_id_,
                format_bytes(size));
    empty_cache();
    block.buffer_ = raw_.allocate(size);  // throws OutOfMemory again when it still does not fit
  }
  std::lock_guard lock(mu_);
  ++stats_.alloc_count;
  stats_.reserved += size;
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return block;
}

void CachingAllocator::give_back(std::unique_ptr<Buffer> buffer, std::size_t size) noexcept {
  std::lock_guard lock(mu_);
  stats_.allocated -= size;
  try {
    free_[size].push_back(std::move(buffer));
  } catch (...) {
    stats_.reserved -= size;  // could not cache it: the buffer is released here
  }
}

void CachingAllocator::empty_cache() {
  decltype(free_) released;
  {
    std::lock_guard lock(mu_);
    for (auto& [size, list] : free_) stats_.reserved -= size * list.size();
    released.swap(free_);
  }
  // The buffers are destroyed here, outside the lock.
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_allocated = stats_.allocated;
}

}  // namespace tessera
