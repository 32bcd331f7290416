// CachingAllocator: size-class pools over a device's raw Allocator, as PyTorch's caching
// allocators keep freed blocks for reuse instead of returning them to the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/allocator.h"

namespace tessera {

class CachingAllocator;

// A move-only handle to one cached block; destroying it returns the block to its pool.
class Block {
 public:
  Block() = default;
  Block(Block&& o) noexcept { *this = std::move(o); }
  Block& operator=(Block&& o) noexcept;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() { release(); }

  Buffer* buffer() const { return buffer_.get(); }
  std::size_t size() const { return size_; }  // the rounded size class, <= buffer()->size()

 private:
  friend class CachingAllocator;
  void release() noexcept;
  std::unique_ptr<Buffer> buffer_;
  std::size_t size_ = 0;
  CachingAllocator* owner_ = nullptr;
};

struct AllocatorStats {
  std::size_t allocated = 0;       // bytes in blocks handed out now (rounded sizes)
  std::size_t reserved = 0;        // bytes held from the raw allocator (handed out + cached)
  std::size_t peak_allocated = 0;  // highest `allocated` since creation or reset_peak()
  std::uint64_t alloc_count = 0;   // calls to the raw allocator
  std::uint64_t requests = 0;      // calls to allocate()
  std::uint64_t cache_hits = 0;    // requests served from the cache
};

// Thread-safe. Must outlive every Block it hands out (devices live until process exit, so this
// holds for the runtime's allocators).
class CachingAllocator {
 public:
  CachingAllocator(Allocator& raw, std::string device_id);
  ~CachingAllocator();

  // A block of at least |bytes| (0 is treated as 1): a cached block of the same size class when
  // one is free, else a new raw allocation. When the raw allocator is out of memory the cache is
  // emptied and the allocation retried once; then OutOfMemory names the device, the request and
  // what is free.
  Block allocate(std::size_t bytes);

  // Returns every cached (free) block to the raw allocator.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();

  // The size class of a request: multiples of 512 bytes up to 4 KiB, then eight steps per power
  // of two (at most 12.5% waste).
  static std::size_t round_size(std::size_t bytes);

 private:
  friend class Block;
  void give_back(std::unique_ptr<Buffer> buffer, std::size_t size) noexcept;

  Allocator& raw_;
  std::string device_id_;
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<std::unique_ptr<Buffer>>> free_;
  AllocatorStats stats_;
};

}  // namespace tessera
