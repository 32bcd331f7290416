// TensorGenerator: the seeded source of rand, randn and randint, as torch.Generator and
// torch.manual_seed. (Named apart from train::Generator, the host-side generator of
// initialisation and shuffling, so that code using both namespaces stays unambiguous.) Every draw
// takes the next 64-bit stream seed, a pure function of the seed and the number of draws so far;
// the op then computes each element from (stream seed, element index) alone (op.h: random_bits), so
// every device gives the same numbers for the same seed, and two consecutive draws differ.
#pragma once

#include <cstdint>
#include <mutex>

namespace tessera {

// Thread-safe. Not copyable (two copies would repeat each other's draws); make a new one with the
// same seed to repeat a sequence.
class TensorGenerator {
 public:
  // torch's default seed (67280421310721), so that an unseeded program is still reproducible.
  static constexpr std::uint64_t kDefaultSeed = 67280421310721ull;

  explicit TensorGenerator(std::uint64_t seed = kDefaultSeed) : seed_(seed) {}
  TensorGenerator(const TensorGenerator&) = delete;
  TensorGenerator& operator=(const TensorGenerator&) = delete;

  // Restarts the sequence of draws from |seed| (torch.Generator.manual_seed).
  void manual_seed(std::uint64_t seed);
  // The seed given last (torch.Generator.initial_seed).
  std::uint64_t initial_seed() const;
  // The stream seed of the next draw; advances the generator.
  std::uint64_t next_stream();

 private:
  mutable std::mutex mu_;
  std::uint64_t seed_;
  std::uint64_t draws_ = 0;
};

// The generator used when a factory gets none (torch.default_generator).
TensorGenerator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(std::uint64_t seed);

}  // namespace tessera
