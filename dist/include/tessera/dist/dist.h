// tessera::dist: data-parallel training over MPI (DDPStrategy, MpiProcessGroup) and the launcher
// helpers that tessera-train uses. Link tessera::dist (CMake target Tessera::dist).
#pragma once

#include <exception>
#include <string>

#include "tessera/dist/ddp.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

// Registers "ddp" with train::register_strategy (make_strategy("ddp"), TrainerOptions::strategy
// = "ddp", and "auto" under a launcher). Idempotent, thread-safe.
void register_strategies();

// Whether this process was started as one of a job of more than one process, from the
// launcher's environment: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), MPICH/Hydra (PMI_SIZE),
// PMIx launchers (PMIX_RANK with SLURM_NTASKS or OMPI_COMM_WORLD_SIZE), SLURM's srun
// (SLURM_PROCID with SLURM_NTASKS). Reads the environment only; starts nothing.
bool launched();
// How the job was started, for messages: "mpirun -np 2", "srun -n 4", or "a single process".
std::string launch_description();

// Ends the job because this rank failed with |error| before or outside a fit: when MPI is started
// and the job has more than one process, prints "tessera: rank R (host H) failed: WHAT; ending
// the job" on stderr and calls MPI_Abort (never returns). Otherwise returns, doing nothing.
void abort_job_if_distributed(const std::exception& error);

// The mpirun that tessera-train --devices N starts itself under: the one found when Tessera was
// built, if it still exists, else "mpirun" (looked up on PATH by exec).
std::string mpirun_path();

}  // namespace tessera::dist
