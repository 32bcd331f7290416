// The "ddp" registration and the launcher's environment.
#include "tessera/dist/dist.h"

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

struct Launch {
  std::string how;  // "mpirun", "srun", "a PMI launcher"
  long size = 0;
};

Launch detect() {
  if (long n = env_count("OMPI_COMM_WORLD_SIZE")) return {"mpirun -np", n};
  if (long n = env_count("PMI_SIZE")) return {"mpiexec -n", n};
  if (env_set("SLURM_PROCID") || env_set("PMIX_RANK"))
    if (long n = env_count("SLURM_NTASKS")) return {"srun -n", n};
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
  if (!MpiProcessGroup::started()) return;
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
