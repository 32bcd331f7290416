// tessera-train under mpirun: the self-start of --devices N, --strategy and the closing note.
#include "train_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "tessera/errors.h"

#ifdef TESSERA_HAVE_DIST
#include "tessera/dist/dist.h"
#endif

namespace tessera::apps {

void launch_if_needed(int devices, const std::string& strategy, int argc, char** argv) {
  if (devices <= 1) return;
#ifndef TESSERA_HAVE_DIST
  (void)strategy;
  (void)argc;
  (void)argv;
  throw ConfigError(fmt::format(
      "--devices {} trains data-parallel over MPI, but this tessera-train was built without MPI "
      "(TESSERA_WITH_MPI=OFF, or MPI not found): install Open MPI (apt-get install openmpi-bin "
      "libopenmpi-dev) and configure with -DTESSERA_WITH_MPI=ON",
      devices));
#else
  if (strategy != "auto" && strategy != "ddp")
    throw ConfigError(fmt::format(
        "--devices {} with --strategy {}: several devices train with --strategy ddp (or auto)",
        devices, strategy));
  if (dist::launched()) return;  // one of the ranks: the launcher started us
  if (std::getenv("TESSERA_TRAIN_STARTED_MPIRUN"))
    throw ConfigError(fmt::format(
        "--devices {}: tessera-train started mpirun, but this process does not see the "
        "launcher's environment (OMPI_COMM_WORLD_SIZE); start it yourself: mpirun -np {} "
        "tessera-train ...",
        devices, devices));
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const std::string mpirun = dist::mpirun_path();
  std::vector<std::string> args{mpirun,      "-np",  std::to_string(devices),
                                "--bind-to", "none", "--oversubscribe"};
  // The drivers' selection variables, forwarded with their values: mpirun passes most of the
  // environment as it is, but was seen to cut OCL_ICD_FILENAMES to its first entry (dropping the
  // NVIDIA OpenCL driver) unless given as -x NAME=VALUE.
  for (const char* name : {"OCL_ICD_FILENAMES", "OCL_ICD_VENDORS", "VK_DRIVER_FILES",
                           "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"})
    if (const char* value = std::getenv(name); value && *value)
      args.insert(args.end(), {"-x", fmt::format("{}={}", name, value)});
  args.push_back(self.empty() ? argv[0] : self);
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  setenv("TESSERA_TRAIN_STARTED_MPIRUN", "1", 1);
  std::fflush(stdout);
  execvp(c_args[0], c_args.data());
  throw Error(
      fmt::format("--devices {}: could not start {}: {} (install openmpi-bin, or start "
                  "the job yourself: mpirun -np {} tessera-train ...)",
                  devices, mpirun, std::strerror(errno), devices));
#endif
}

std::shared_ptr<train::Strategy> make_train_strategy(const std::string& name, int num_nodes) {
#ifdef TESSERA_HAVE_DIST
  dist::register_strategies();
  if (name == "ddp" || (name == "auto" && dist::launched())) {
    dist::DDPOptions o;
    o.num_nodes = num_nodes;
    return std::make_shared<dist::DDPStrategy>(o);
  }
#endif
  if (num_nodes != 1)
    throw ConfigError(fmt::format(
        "--num-nodes {} needs several processes (--strategy ddp under mpirun or srun); this run is "
        "one process",
        num_nodes));
  return train::make_strategy(name);
}

std::string sync_note(train::Strategy& strategy) {
#ifdef TESSERA_HAVE_DIST
  if (auto* ddp = dynamic_cast<dist::DDPStrategy*>(&strategy)) {
    const dist::DDPCounters c = ddp->counters();
    return fmt::format(
        "DDP: {} processes; {} of gradients all-reduced per process in {} bucket(s) over {} "
        "step(s); {:.2f} s in all-reduce, {:.2f} s waited for it after backward (rank 0)",
        strategy.world_size(), format_bytes(static_cast<std::size_t>(c.bytes_all_reduced)),
        c.buckets, c.syncs, c.all_reduce_seconds, c.wait_seconds);
  }
#else
  (void)strategy;
#endif
  return {};
}

void end_job_on_failure(const std::exception& error) {
#ifdef TESSERA_HAVE_DIST
  dist::abort_job_if_distributed(error);
#else
  (void)error;
#endif
}

}  // namespace tessera::apps
