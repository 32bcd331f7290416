// tessera-train's data-parallel side: starting itself under mpirun (--devices N), the strategy
// its options select, and the closing note on the gradient synchronisation.
#pragma once

#include <memory>
#include <string>

#include "tessera/train/strategy.h"

namespace tessera::apps {

// With |devices| > 1 outside a launcher (mpirun, srun), replaces this process by
// "mpirun -np |devices| --bind-to none --oversubscribe ... <this program> <argv...>" (Lightning's
// devices=N, strategy="ddp" on one machine): returns only when no start is needed. Sets
// OMPI_ALLOW_RUN_AS_ROOT(+_CONFIRM) when run as root and Open MPI's shared-memory single-copy
// mechanism to none (containers lack the ptrace rights it needs). Throws ConfigError when
// Tessera was built without MPI, or with a strategy other than auto/ddp, and Error when mpirun
// can not be started (naming it).
void launch_if_needed(int devices, const std::string& strategy, int argc, char** argv);

// The strategy for --strategy |name| (auto, single_device, ddp) and --num-nodes: "ddp" (or
// "auto" under a launcher) gives a DDPStrategy that checks |num_nodes|. Throws ConfigError for an
// unknown name (listing the known ones) or "ddp" without MPI.
std::shared_ptr<train::Strategy> make_train_strategy(const std::string& name, int num_nodes);

// "DDP: 2 processes; 1.2 MiB all-reduced in 10 bucket(s) ..." for a DDP strategy, else "".
std::string sync_note(train::Strategy& strategy);

// Ends the job when this process is one rank of several (tessera::dist::abort_job_if_distributed);
// returns otherwise.
void end_job_on_failure(const std::exception& error);

}  // namespace tessera::apps
