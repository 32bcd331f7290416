// Allocator: the raw device-memory allocator a plugin implements. The core wraps each one in a
// CachingAllocator (caching_allocator.h); tensors never call the raw allocator directly.
#pragma once

#include <cstddef>
#include <memory>

#include "tessera/buffer.h"

namespace tessera {

struct MemoryInfo {
  std::size_t total = 0;  // bytes the device has for allocations
  std::size_t free = 0;   // bytes still available, as far as the driver knows
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // Allocates at least |bytes| (> 0) bytes of device memory aligned to at least 64 bytes.
  // Thread-safe. Throws OutOfMemory naming the device, the request and what is free; never
  // returns null.
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;

  // Total and free device memory. Thread-safe, cheap enough to call per allocation failure.
  virtual MemoryInfo memory() const = 0;
};

}  // namespace tessera
