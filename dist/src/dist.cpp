// The "ddp" registration and the launcher's environment.
#include "tessera/dist/dist.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "dist_internal.h"

namespace tessera::dist {

namespace {

// A positive integer from the environment, or 0.
long env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? n : 0;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// This process's rank as the launcher numbered it (0 when it says nothing).
long env_rank(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? n : 0;
}

struct Launch {
  std::string how;  // "mpirun", "srun", "a PMI launcher"
  long size = 0;
  long rank = 0;
};

Launch detect() {
  if (long n = env_count("OMPI_COMM_WORLD_SIZE"))
    return {"mpirun -np", n, env_rank("OMPI_COMM_WORLD_RANK")};
  if (long n = env_count("PMI_SIZE")) return {"mpiexec -n", n, env_rank("PMI_RANK")};
  if (env_set("SLURM_PROCID") || env_set("PMIX_RANK"))
    if (long n = env_count("SLURM_NTASKS")) return {"srun -n", n, env_rank("SLURM_PROCID")};
  return {};
}

}  // namespace

bool launched() {
  return detect().size > 1;
}

std::string launch_description() {
  const Launch l = detect();
  if (l.size == 0) return "a single process";
  return fmt::format("{} {}", l.how, l.size);
}

void register_strategies() {
  static std::once_flag once;
  std::call_once(once, [] {
    train::register_strategy(
        "ddp", [] { return std::make_shared<DDPStrategy>(); }, [] { return launched(); });
  });
}

std::string failure_message(MpiProcessGroup& group, const std::exception& error) {
  return fmt::format("tessera: rank {} (host {}) failed: {}; ending the job", group.rank(),
                     group.host(), error.what());
}

void abort_job_if_distributed(const std::exception& error) {
  if (!MpiProcessGroup::started()) {
    // Failed before MPI started (a bad option, no checkpoint on this machine): this process
    // exits, and the launcher ends the job; say which rank it was.
    if (const Launch l = detect(); l.size > 1) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      std::fprintf(stderr, "tessera: rank %ld (host %s) failed before the job started: %s\n",
                   l.rank, host, error.what());
    }
    return;
  }
  MpiProcessGroup& group = MpiProcessGroup::world();
  if (group.size() > 1) group.abort(failure_message(group, error));
}

std::string mpirun_path() {
#ifdef TESSERA_MPIEXEC
  std::error_code ec;
  if (std::filesystem::exists(TESSERA_MPIEXEC, ec)) return TESSERA_MPIEXEC;
#endif
  return "mpirun";
}

}  // namespace tessera::dist
