#include "tessera/generator.h"

namespace tessera {
namespace {

// splitmix64's output function.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void TensorGenerator::manual_seed(std::uint64_t seed) {
  std::lock_guard lock(mu_);
  seed_ = seed;
  draws_ = 0;
}

std::uint64_t TensorGenerator::initial_seed() const {
  std::lock_guard lock(mu_);
  return seed_;
}

std::uint64_t TensorGenerator::next_stream() {
  std::lock_guard lock(mu_);
  return mix64(seed_ ^ mix64(draws_++));
}

TensorGenerator& default_generator() {
  static TensorGenerator g;
  return g;
}

void manual_seed(std::uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tessera
