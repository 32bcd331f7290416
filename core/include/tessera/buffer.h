// Buffer: one allocation of device memory.
#pragma once

#include <cstddef>

namespace tessera {

// A block of memory owned by one device's allocator. A buffer only ever reaches kernels and queues
// of the device that allocated it, so a plugin may static_cast it to its own buffer type.
// Buffers are not copyable; destroying one returns its memory to the device. Destruction must not
// throw and must be safe while work on the buffer is queued (the plugin defers the release).
class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Size in bytes: at least what was requested.
  virtual std::size_t size() const = 0;

  // Host address of byte 0 when the memory is host-visible and stays mapped for the buffer's
  // life (CPU, lavapipe, integrated GPUs); null otherwise. Host reads and writes through it are
  // ordered with device work only by Queue::synchronize().
  virtual void* host_ptr() const { return nullptr; }
};

}  // namespace tessera
