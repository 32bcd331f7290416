// How the Trainer spreads a fit over processes: Lightning's Strategy (SingleDeviceStrategy,
// DDPStrategy). train/ defines the interface and the single-process strategy; tessera::dist
// (dist/, over MPI) implements data-parallel training and registers it as "ddp". Nothing here
// names MPI: a ProcessGroup is any set of processes that can run host collectives.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/errors.h"

namespace tessera {
class Device;
}

namespace tessera::train {

// A collective failed or the processes of a job disagree (a peer died, a model or version that
// differs between ranks). The message names the ranks and hosts involved.
class DistributedError : public Error {
 public:
  using Error::Error;
};

class Module;
class Variable;

// Collectives over host memory among the processes of one job (torch.distributed's process
// group). Every process calls the same collectives in the same order with the same sizes; a
// collective returns when this process's part is done. Called from one thread at a time (the
// implementation may hand the work to a thread of its own). Failures (a peer that died, a size
// that differs between processes) throw DistributedError naming the collective and the ranks.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This process's rank among the processes of its machine, how many run there, and the
  // machine's name (for messages).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string host() const = 0;

  // Element-wise sum over all processes, in place.
  virtual void all_reduce_sum(std::span<float> values) = 0;
  virtual void all_reduce_sum(std::span<double> values) = 0;
  // Element-wise maximum over all processes, in place (agreement checks, stop decisions).
  virtual void all_reduce_max(std::span<double> values) = 0;
  // |bytes| from process |root| into every other process's |bytes| (same size everywhere).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Every process's |value|, indexed by rank (values may differ in length).
  virtual std::vector<std::string> all_gather(const std::string& value) = 0;
  virtual void barrier() = 0;
};

// How a fit runs: which device this process trains on, how the module's parameters and
// gradients agree across processes, and which process writes files and prints. The Trainer
// calls, in this order: setup_environment (before any device is touched), device, setup_module
// (after the module is on the device, before configure_optimizers and before a checkpoint is
// loaded), then per batch before_backward/after_backward, the collectives below for metrics and
// stop decisions, and teardown at the end of fit (also when fit throws, after on_exception). One
// Strategy serves one fit at a time.
class Strategy {
 public:
  virtual ~Strategy() = default;
  // "single_device", "ddp".
  virtual std::string name() const = 0;

  // The processes of the job; null for a single process.
  virtual ProcessGroup* process_group() { return nullptr; }
  int world_size() { return process_group() ? process_group()->size() : 1; }
  int global_rank() { return process_group() ? process_group()->rank() : 0; }
  int local_rank() { return process_group() ? process_group()->local_rank() : 0; }
  // Lightning's trainer.is_global_zero: the process that prints, logs and writes checkpoints.
  bool is_global_zero() { return global_rank() == 0; }

  // Before the device is resolved (CPU thread counts, for instance). Idempotent.
  virtual void setup_environment() {}
  // This process's device, from the Trainer's accelerator and devices options (Lightning's
  // meaning: |devices| devices per machine, one process each). Throws what resolve_accelerator
  // throws, and ConfigError when |devices| does not match the processes the job was started
  // with.
  virtual Device& device(const std::string& accelerator, int devices) = 0;
  // Makes |module| (on device()) agree across processes (DDP: rank 0's parameters and buffers
  // broadcast, the model's structure and dtypes checked equal on every rank) and prepares the
  // gradient synchronisation. Throws DistributedError naming the ranks that differ.
  virtual void setup_module(Module& module) { (void)module; }
  // Around each backward pass. |sync| is false for the batches within gradient accumulation that
  // are not the last before an optimizer step (Lightning's no_sync): their gradients stay local.
  // After after_backward(true) returns, every parameter's gradient is the mean of the processes'
  // gradients (DDP), in time for clipping and the optimizer step.
  virtual void before_backward(bool sync) { (void)sync; }
  virtual void after_backward(bool sync) { (void)sync; }

  // Metric and decision agreement, host values: in place, summed / maximised over processes
  // (identity for one process).
  virtual void reduce_sum(std::span<double> values) {
    if (auto* pg = process_group()) pg->all_reduce_sum(values);
  }
  virtual void reduce_max(std::span<double> values) {
    if (auto* pg = process_group()) pg->all_reduce_max(values);
  }
  virtual void barrier() {
    if (auto* pg = process_group()) pg->barrier();
  }

  // fit threw |error| on this process. A distributed strategy makes the job end (every other
  // process exits with a message naming this rank and its host) instead of letting the others
  // wait for it; the Trainer rethrows afterwards.
  virtual void on_exception(const std::exception& error) { (void)error; }
  // At the end of fit (also after on_exception): gradient hooks removed, threads joined.
  virtual void teardown() {}
};

// One process on one device (Lightning's SingleDeviceStrategy).
class SingleDeviceStrategy final : public Strategy {
 public:
  std::string name() const override { return "single_device"; }
  // resolve_accelerator(accelerator, devices); devices > 1 is refused, naming strategy='ddp'.
  Device& device(const std::string& accelerator, int devices) override;
};

// Strategies by name, for TrainerOptions::strategy and tessera-train --strategy. "auto" and
// "single_device" are built in; tessera::dist registers "ddp" (dist::register_strategies(), which
// the DDP constructors also call). A factory may throw ConfigError (an option the strategy does
// not support) or DistributedError.
// |launched| (may be empty) says whether this process was started as one of a multi-process job
// that the strategy serves (dist's: mpirun or srun with more than one process).
using StrategyFactory = std::function<std::shared_ptr<Strategy>()>;
void register_strategy(const std::string& name, StrategyFactory factory,
                       std::function<bool()> launched = {});
// A new strategy of |name|. "auto": the first registered strategy whose |launched| says yes,
// else single_device. Throws ConfigError for an unknown name, listing the registered ones and
// saying that "ddp" needs tessera::dist.
std::shared_ptr<Strategy> make_strategy(const std::string& name);
std::vector<std::string> registered_strategies();

}  // namespace tessera::train
