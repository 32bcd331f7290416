// A job whose last rank fails while the others wait in collectives: "throw" (an exception that
// goes through DDPStrategy::on_exception, as in the Trainer), "kill" (SIGKILL, as the OOM killer
// or a user does), "early" (an exception before any strategy exists, tessera-train's path before
// fit). The job must end within seconds, naming the rank and its host (expect_job_ends.sh).
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "tessera/dist/dist.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "kill" && mode != "early") {
    std::fprintf(stderr, "usage: tessera_dist_fault throw|kill|early\n");
    return 2;
  }
  auto& group = tessera::dist::MpiProcessGroup::world();
  tessera::dist::DDPStrategy ddp;
  group.barrier();
  if (group.rank() == group.size() - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::runtime_error error("the test's failure");
    if (mode == "throw") ddp.on_exception(error);
    if (mode == "early") tessera::dist::abort_job_if_distributed(error);
    if (mode == "kill") std::raise(SIGKILL);
    return 1;
  }
  // The others wait for a peer that will never come.
  for (;;) {
    std::vector<double> v{1};
    group.all_reduce_sum(std::span<double>(v));
  }
}
