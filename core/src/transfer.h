// Copies between buffers of two devices, through whichever side is host-visible.
#pragma once

#include <cstddef>

#include "tessera/device.h"

namespace tessera {

// Copies |bytes| from |src| (of device |from|) to |dst| (of device |to|), ordered after earlier
// work on both devices' queues. Returns when |dst| holds the bytes or they are enqueued on |to|.
void transfer(Device& from, const Buffer& src, std::size_t src_offset, Device& to, Buffer& dst,
              std::size_t dst_offset, std::size_t bytes);

}  // namespace tessera
