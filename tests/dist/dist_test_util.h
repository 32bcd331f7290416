// What the tests under mpirun share: the job's process group and one random seed for the whole
// job (rank 0's, broadcast), so that every rank draws the same fresh inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>

#include "tessera/dist/dist.h"

namespace tessera::dist::testing {

inline MpiProcessGroup& group() {
  return MpiProcessGroup::world();
}

// TESSERA_TEST_SEED repeats a job's inputs (as for the conformance suite); rank 0 prints the seed
// when it is first drawn.
inline std::uint64_t job_seed() {
  static const std::uint64_t seed = [] {
    const char* given = std::getenv("TESSERA_TEST_SEED");
    std::uint64_t s = given ? std::strtoull(given, nullptr, 10) : std::random_device{}();
    group().broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&s, 1)), 0);
    if (group().rank() == 0)
      std::printf("dist test inputs: TESSERA_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

}  // namespace tessera::dist::testing
