// What the tests under mpirun share: the job's process group and one random seed for the whole
// job (rank 0's, broadcast), so that every rank draws the same fresh inputs.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "tessera/dist/dist.h"

namespace tessera::dist::testing {

inline MpiProcessGroup& group() {
  return MpiProcessGroup::world();
}

inline std::uint64_t job_seed() {
  static const std::uint64_t seed = [] {
    std::uint64_t s = std::random_device{}();
    group().broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&s, 1)), 0);
    return s;
  }();
  return seed;
}

}  // namespace tessera::dist::testing
