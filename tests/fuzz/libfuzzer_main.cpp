// libFuzzer's entry points for one target, chosen at compile time (TESSERA_FUZZ_TARGET, e.g.
// tessera::fuzz::idx). Uncaught exceptions are left to terminate the process, so that the report
// shows where they were thrown.
#include "fuzz_targets.h"

// Runs the target once on an empty input, so that what it sets up once (cpu:0, its plugin) is
// loaded before fuzzing starts and its coverage counters are known from the first input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TESSERA_FUZZ_TARGET(nullptr, 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  TESSERA_FUZZ_TARGET(data, size);
  return 0;
}
