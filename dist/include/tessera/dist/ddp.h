// Data-parallel training: Lightning's DDPStrategy over torch's DistributedDataParallel, on MPI.
// One process per device; rank 0's weights are broadcast at the start; gradients are averaged in
// buckets that are all-reduced (through host memory) on the group's communication thread while
// the backward pass goes on; every rank then takes the same optimizer step. docs/distributed.md
// has the whole story.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tessera/train/autograd.h"
#include "tessera/train/strategy.h"

namespace tessera::dist {

class MpiProcessGroup;

struct DDPOptions {
  // The size at which a gradient bucket is cut (torch's DistributedDataParallel bucket_cap_mb,
  // 25 MiB). Must be positive.
  double bucket_cap_mb = 25;
  // Rank 0's buffers (BatchNorm's running statistics) copied to every rank after each synchronised
  // backward pass (torch's broadcast_buffers=True).
  bool broadcast_buffers = true;
  // Machines the job must span (Lightning's num_nodes; 0: not checked). ConfigError from device()
  // when the job's distinct hosts differ.
  int num_nodes = 0;
};

// What the gradient synchronisation cost, since the strategy was made (for the closing note).
struct DDPCounters {
  std::int64_t bytes_all_reduced = 0;  // gradient bytes this rank sent into all-reduces
  std::int64_t buckets = 0;            // bucket all-reduces
  std::int64_t syncs = 0;              // synchronised backward passes
  double all_reduce_seconds = 0;       // on the communication thread: read back, reduce, write
  double wait_seconds = 0;             // after_backward(true) waiting for the buckets
};

class DDPStrategy final : public train::Strategy {
 public:
  // Starts MPI (MpiProcessGroup::world()) and registers "ddp" (register_strategies()). Throws
  // ConfigError for bucket_cap_mb not positive or num_nodes negative, DistributedError when MPI
  // can not start.
  explicit DDPStrategy(DDPOptions options = {});
  ~DDPStrategy() override;

  std::string name() const override { return "ddp"; }
  train::ProcessGroup* process_group() override;
  const DDPOptions& options() const { return options_; }
  DDPCounters counters() const;

  // TESSERA_CPU_THREADS = max(1, cores / processes on this machine) unless the user set it, so
  // that CPU ranks share the cores. Call before the runtime starts (the Trainer does).
  void setup_environment() override;
  // The accelerator's device that this rank's local rank selects: for a plugin name ("cpu",
  // "vulkan", or "auto": the plugin of the default device) its devices of their best kind
  // (discrete GPUs before integrated ones, GPUs before CPU devices such as PoCL's), index
  // local_rank % count (a warning when ranks of one machine share a device); a device named with
  // its index
  // ("vulkan:1") is taken as named. |devices| 1 means "as launched"; any other value must equal
  // the processes on this machine. Throws ConfigError (naming how the job was started and what
  // to pass) for a |devices| or num_nodes that does not match the job, and what
  // resolve_accelerator throws.
  Device& device(const std::string& accelerator, int devices) override;
  // Checks that every rank runs the same Tessera build on the same kind of device with the same
  // parameters and buffers (names, shapes, dtypes): DistributedError on every rank naming the
  // ranks and hosts that differ from rank 0 and the first differing entry. Then broadcasts rank
  // 0's parameters and buffers, builds the gradient buckets (parameters that require grad, in
  // reverse registration order, cut at bucket_cap_mb, one dtype per bucket) and registers a
  // post-accumulate-grad hook on each parameter. Collective. A second call first undoes the
  // first (teardown).
  void setup_module(train::Module& module) override;
  // |sync| true: the hooks of the coming backward pass launch each bucket when its last gradient
  // is accumulated. false: no hook acts (Lightning's no_sync); gradients stay local.
  void before_backward(bool sync) override;
  // |sync| true: launches the buckets still waiting (a parameter without a gradient in this pass
  // counts as zeros), waits for every bucket, sets each parameter's gradient to its view of the
  // bucket's averaged tensor, then broadcasts rank 0's buffers when broadcast_buffers. Throws
  // what a bucket's all-reduce threw (DistributedError).
  void after_backward(bool sync) override;
  // Prints "tessera: rank R (host H) failed: WHAT; ending the job" on stderr and ends every
  // process of the job (MPI_Abort) when the job has more than one process; nothing otherwise.
  void on_exception(const std::exception& error) override;
  // Removes the hooks, waits for buckets in flight, logs the counters (info level).
  void teardown() override;

 private:
  struct Bucket;
  void on_grad(std::size_t param);
  void launch_ready();
  void launch(Bucket& bucket);
  void wait_all();
  void clear_buckets();

  DDPOptions options_;
  MpiProcessGroup* group_;
  std::vector<train::Variable> params_;
  std::vector<std::pair<std::size_t, std::size_t>> slot_;  // per param: bucket, index in it
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<train::Variable::HookHandle> hooks_;
  std::vector<Tensor*> buffers_;
  std::size_t next_launch_ = 0;
  bool syncing_ = false;
  struct Stats;
  std::shared_ptr<Stats> stats_;
};

}  // namespace tessera::dist
