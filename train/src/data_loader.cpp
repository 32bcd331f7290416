#include "tessera/train/data_loader.h"

#include <typeinfo>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "type_name.h"

namespace tessera::train {

void check_distributed(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw InvalidArgument(fmt::format(
        "set_distributed: rank {} of world_size {} is not valid: pass 0 <= rank < world_size", rank,
        world_size));
}

std::int64_t distributed_share(std::int64_t n, int rank, int world_size, bool pad_to_equal) {
  if (world_size == 1) return n;
  if (pad_to_equal) return (n + world_size - 1) / world_size;
  return n > rank ? (n - rank + world_size - 1) / world_size : 0;
}

void DataLoader::set_distributed(int rank, int world_size, bool pad_to_equal) {
  (void)pad_to_equal;
  check_distributed(rank, world_size);
  if (world_size == 1) return;
  throw ConfigError(fmt::format(
      "this data loader ({}) can not be sharded among {} processes: it does not implement "
      "set_distributed; implement it (each rank takes its share of every epoch), or train with "
      "one process",
      detail::type_name(typeid(*this)), world_size));
}

}  // namespace tessera::train
