// Seeded random numbers for initialisation, shuffling and dropout. Every value is a pure function
// of the seed and a counter (splitmix64), so runs repeat exactly on every platform and a resumed
// run can recompute any stream from the seed alone.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::train {

// splitmix64's output function: a well-mixed 64-bit hash.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The seed of the sub-stream |stream| of |seed| (an epoch's shuffle, a layer's init).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed ^ mix64(stream));
}

// A small deterministic generator. Not thread-safe; cheap to copy.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : state_(seed) {}
  std::uint64_t next_u64() { return mix64(state_++); }
  // Uniform in [0, 1) with 24 random bits (exactly representable in float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal (Box-Muller).
  float normal();
  // Uniform integer in [0, n), n > 0 (Lemire's method without the rejection bias).
  std::uint64_t below(std::uint64_t n);
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

// The order 0..n-1 shuffled by Fisher-Yates from |seed|.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed);

}  // namespace tessera::train
