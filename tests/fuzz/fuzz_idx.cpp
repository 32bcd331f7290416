// Fuzz target: the IDX reader (fuzz_targets.h states the contract).
#include <fmt/format.h>

#include "fuzz_targets.h"
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
  std::size_t bytes = 1;
  for (std::int64_t d : a.dims) bytes *= static_cast<std::size_t>(d);
  if (a.dims.empty() || a.dims.size() > 4 || bytes != a.data.size())
    finding("idx", fmt::format("accepted {} dimensions describing {} bytes with {} bytes of data",
                               a.dims.size(), bytes, a.data.size()));
  return true;
}

}  // namespace tessera::fuzz
