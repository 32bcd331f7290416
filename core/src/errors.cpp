#include "tessera/errors.h"

#include "tessera/checked.h"

#include <fmt/format.h>

namespace tessera {

std::string format_bytes(std::size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

OutOfMemory::OutOfMemory(std::string device, std::size_t requested, std::size_t free_bytes)
    : Error(fmt::format("OutOfMemory: {} could not allocate {} ({} bytes); {} free. Use a smaller "
                        "batch, free tensors you no longer need, or pick another device with "
                        "TESSERA_DEVICE.",
                        device, format_bytes(requested), requested, format_bytes(free_bytes))),
      device_(std::move(device)),
      requested_(requested),
      free_(free_bytes) {}

std::int64_t mul_or_throw(std::int64_t a, std::int64_t b, std::string_view what) {
  if (auto r = checked_mul(a, b)) return *r;
  throw InvalidArgument(fmt::format("{} overflows 64 bits ({} * {})", what, a, b));
}

std::size_t bytes_or_throw(std::int64_t count, std::size_t element_size, std::string_view what) {
  if (auto r = checked_bytes(count, element_size)) return *r;
  throw InvalidArgument(
      fmt::format("{} overflows ({} elements of {} bytes)", what, count, element_size));
}

}  // namespace tessera
