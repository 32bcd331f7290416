#include "transfer.h"

#include <vector>

namespace tessera {

void transfer(Device& from, const Buffer& src, std::size_t src_offset, Device& to, Buffer& dst,
              std::size_t dst_offset, std::size_t bytes) {
  if (bytes == 0) return;
  if (&from == &to) {
    from.queue().copy(src, src_offset, dst, dst_offset, bytes);
    return;
  }
  if (auto* host = static_cast<const std::byte*>(src.host_ptr())) {
    from.queue().synchronize();  // pending writes to src must land before the host reads it
    to.queue().write(dst, dst_offset, host + src_offset, bytes);
    return;
  }
  if (auto* host = static_cast<std::byte*>(dst.host_ptr())) {
    to.queue().synchronize();  // earlier work on dst's memory must finish before it is overwritten
    from.queue().read(src, src_offset, host + dst_offset, bytes);
    return;
  }
  std::vector<std::byte> staging(bytes);
  from.queue().read(src, src_offset, staging.data(), bytes);
  to.queue().write(dst, dst_offset, staging.data(), bytes);
}

}  // namespace tessera
