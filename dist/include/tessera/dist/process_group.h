// The processes of an MPI job as a train::ProcessGroup (torch.distributed's MPI backend): host
// collectives over MPI_COMM_WORLD, every MPI call made on one communication thread that the group
// owns, so that the training thread can hand it work (a gradient bucket) and go on.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/train/strategy.h"

namespace tessera::dist {

class MpiProcessGroup final : public train::ProcessGroup {
 public:
  // The process-wide group of MPI_COMM_WORLD. The first call starts the communication thread,
  // which calls MPI_Init_thread (MPI_THREAD_FUNNELED: that thread makes every MPI call), sets
  // MPI_ERRORS_RETURN, finds the local rank and size (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED)
  // and the host (MPI_Get_processor_name); later calls return the same group. Outside a launcher
  // this is a job of one process (MPI's singleton start). MPI_Finalize runs when the process
  // exits normally. Thread-safe. Throws DistributedError when MPI can not start.
  static MpiProcessGroup& world();
  // Whether world() has been started in this process (nothing is started by asking).
  static bool started();

  ~MpiProcessGroup() override;
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string host() const override { return host_; }
  // Distinct hosts of the job (from the hosts' names; all_gather on first call, cached: the first
  // call is collective).
  int num_hosts();

  // The collectives of train::ProcessGroup (MPI_Allreduce with MPI_SUM / MPI_MAX, MPI_Bcast,
  // MPI_Allgather(v), MPI_Barrier). Called from any one thread at a time, or from a task on the
  // communication thread (they then run there directly). A failing MPI call throws
  // DistributedError naming the collective, this rank and host, and MPI's message; a |root|
  // outside [0, size) throws InvalidArgument.
  void all_reduce_sum(std::span<float> values) override;
  void all_reduce_sum(std::span<double> values) override;
  void all_reduce_max(std::span<double> values) override;
  void broadcast(std::span<std::byte> bytes, int root) override;
  std::vector<std::string> all_gather(const std::string& value) override;
  void barrier() override;

  // Runs |task| on the communication thread after the tasks posted before it (FIFO). The future
  // holds what the task threw. Thread-safe.
  std::future<void> post(std::function<void()> task);

  // Ends every process of the job now (MPI_Abort on MPI_COMM_WORLD with |code|), after writing
  // |message| (when not empty) to stderr. Called from any thread: it is the one MPI call made off
  // the communication thread, since that thread may be blocked in a collective that a failed peer
  // will never join. Never returns.
  [[noreturn]] void abort(const std::string& message, int code = 1);

 private:
  struct Worker;
  MpiProcessGroup();
  template <class F>
  void run(F&& f);  // on the communication thread, waiting for it

  std::unique_ptr<Worker> worker_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, num_hosts_ = 0;
  std::string host_;
};

}  // namespace tessera::dist
