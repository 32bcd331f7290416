// Fuzz target: the IDX reader (fuzz_targets.h states the contract).
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fuzz_targets.h"
#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/train/data.h"

namespace tessera::fuzz {

bool idx(const std::uint8_t* data, std::size_t size) {
  train::IdxArray a;
  try {
    a = train::read_idx(as_file(data, size));
  } catch (const Error&) {
    return false;
  }
  std::optional<std::uint64_t> bytes = 1;
  for (std::int64_t d : a.dims)
    if (bytes) bytes = checked_mul(*bytes, static_cast<std::uint64_t>(d));
  if (!bytes)
    finding("idx", fmt::format("accepted dimensions [{}] whose product overflows 64 bits",
                               fmt::join(a.dims, ", ")));
  if (a.dims.empty() || a.dims.size() > 4 || *bytes != a.data.size())
    finding("idx", fmt::format("accepted dimensions [{}] ({} bytes) with {} bytes of data",
                               fmt::join(a.dims, ", "), *bytes, a.data.size()));
  return true;
}

}  // namespace tessera::fuzz
