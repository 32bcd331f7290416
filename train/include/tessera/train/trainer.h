// The Trainer: Lightning's Trainer(accelerator=..., devices=..., max_epochs=...) for Tessera.
// It picks the device, moves a LightningModule (lightning.h) there and runs its training loop:
// training_step, backward, gradient clipping, optimizer and scheduler steps, gradient
// accumulation, validation within and after epochs, metrics, and its callbacks (progress bar, CSV
// log, checkpoints, early stopping, plot: callbacks.h).
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/train/autocast.h"
#include "tessera/train/checkpoint.h"
#include "tessera/train/data_loader.h"
#include "tessera/train/lightning.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

class Trainer;
class MetricCollector;

// Training progress within an epoch, reported every TrainerOptions::log_every_n_steps batches.
struct StepProgress {
  std::int64_t epoch = 0;                   // 1-based
  std::int64_t max_epochs = 0;              // -1: unbounded
  std::int64_t batch = 0, num_batches = 0;  // batches done in this epoch, of
  std::int64_t samples = 0;                 // samples done in this epoch
  std::int64_t global_step = 0, max_steps = -1;
  double loss = 0;     // mean of the training_step losses read back in this epoch so far
  double lr = 0;       // the optimizer's (first group's) learning rate
  double seconds = 0;  // since the epoch started
  std::map<std::string, double> metrics;  // the metrics logged with prog_bar, latest values
};

// Hooks into a fit, as Lightning's Callback. Called on the training thread; an exception stops
// the fit and propagates.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(Trainer&) {}
  virtual void on_train_progress(Trainer&, const StepProgress&) {}
  // After every validation run; Trainer::callback_metrics() holds its metrics.
  virtual void on_validation_end(Trainer&) {}
  // After every training epoch (after its validation); the newest history row is the epoch's.
  virtual void on_train_epoch_end(Trainer&) {}
  virtual void on_fit_end(Trainer&) {}

  // A callback with state to checkpoint (ModelCheckpoint's best files, EarlyStopping's wait
  // count) returns a key unique among the callbacks ("" : nothing to save), its state, and loads
  // it back; load_state_dict throws InvalidArgument naming the entry and changes nothing when the
  // state is malformed.
  virtual std::string state_key() const { return {}; }
  virtual std::map<std::string, std::string> state_dict() const { return {}; }
  virtual void load_state_dict(const std::map<std::string, std::string>&) {}

  // Lightning's @rank_zero_only: true for a callback that only prints or writes files (the
  // progress bar, the CSV log, the plot); the Trainer calls it on the global-zero process alone.
  // Callbacks with state that must agree across processes (ModelCheckpoint, EarlyStopping) run
  // on every process (false, the default).
  virtual bool rank_zero_only() const { return false; }
};

// Lightning's strategy argument: a registered name ("auto", "single_device", "ddp") or an
// instance (std::make_shared<tessera::dist::DDPStrategy>(...)).
struct StrategyChoice {
  StrategyChoice() = default;
  StrategyChoice(const char* n) : name(n) {}             // NOLINT: implicit, as Lightning
  StrategyChoice(std::string n) : name(std::move(n)) {}  // NOLINT
  template <class S>
  requires std::derived_from<S, Strategy> StrategyChoice(std::shared_ptr<S> s)
      : instance(std::move(s)) {}  // NOLINT
  std::string name = "auto";
  std::shared_ptr<Strategy> instance;  // wins over |name| when set
};

struct TrainerOptions {
  // "auto" (TESSERA_DEVICE when set, else the best device), a plugin name ("cpu", "vulkan",
  // "opencl", or any loaded plugin's), or one device ("vulkan:1").
  std::string accelerator = "auto";
  // Devices per machine, one process each (Lightning's devices). Above 1 needs a data-parallel
  // strategy, and the job must have been started with that many processes per machine (mpirun,
  // srun, or tessera-train --devices N, which starts them).
  int devices = 1;
  int num_nodes = 1;  // machines of the job (Lightning's num_nodes); checked against the launch
  StrategyChoice strategy;
  std::int64_t max_epochs = 10;          // -1: unbounded (max_steps must then be set)
  std::int64_t max_steps = -1;           // optimizer steps; -1: no limit. Stops within an epoch.
  std::int64_t limit_train_batches = 0;  // batches per epoch; 0: all
  std::int64_t limit_val_batches = 0;    // batches per validation; 0: all
  // Lightning's: a fraction of the training epoch (0 < v <= 1: validate every
  // max(1, int(v * batches)) batches) or a batch count (an integer > 1, at most the batches of an
  // epoch). Rounded up to a multiple of accumulate_grad_batches, so that validation (and the
  // checkpoints taken then) always follows an optimizer step.
  double val_check_interval = 1.0;
  std::int64_t check_val_every_n_epoch = 1;
  double gradient_clip_val = 0;                  // 0: no clipping
  std::string gradient_clip_algorithm = "norm";  // "norm" (clip_grad_norm_) or "value"
  std::int64_t accumulate_grad_batches = 1;      // batches per optimizer step
  // Lightning's precision: "32-true" (f32 throughout), "16-mixed" (each training and validation
  // step under AutocastGuard(f16), the loss scaled by a GradScaler; steps it skips for
  // non-finite gradients are counted as the progress metric skipped_steps) or "bf16-mixed"
  // (AutocastGuard(bf16), no scaling). Also Lightning's older "32", "16" and "bf16". What
  // autocast changes today is in autocast.h: the GEMMs of matmul, linear and bmm, and
  // attention.
  std::string precision = "32-true";
  std::int64_t log_every_n_steps = 16;  // logged values are read back this often (batches)
  // Lightning's enable_progress_bar: when no ProgressBar is among |callbacks|, the Trainer adds
  // one on stdout (a bar on a terminal, one line per epoch otherwise). false: no progress output.
  bool enable_progress_bar = true;
  // false: no ModelCheckpoint may be among |callbacks| (Lightning's enable_checkpointing; the
  // Trainer adds none by itself, so a run writes no file unless asked).
  bool enable_checkpointing = true;
  std::filesystem::path default_root_dir;  // where callbacks without a path write ("." if empty)
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::uint64_t seed = 0;  // Dropout's masks derive from it (initialisation is the caller's)
  // Lightning's sync_batchnorm: with more than one process, every BatchNorm2d of the module
  // normalises by the statistics of the global batch (convert_sync_batchnorm with the strategy's
  // process group) during fit; without it (the default, as PyTorch's DDP) each process uses its
  // own batch's statistics. No effect with one process.
  bool sync_batchnorm = false;
};

// One Trainer runs one fit at a time on the thread that calls it.
class Trainer {
 public:
  // Resolves the strategy (TrainerOptions::strategy: the instance, else make_strategy(name)),
  // calls its setup_environment and then its device(accelerator, devices): the device is resolved
  // now. Throws what make_strategy and Strategy::device throw (ConfigError for an unknown strategy,
  // or devices > 1 without a data-parallel strategy or not matching the processes launched),
  // ConfigError for num_nodes below 1 or not equal to the number of machines the processes run
  // on. Throws ConfigError naming the option and its valid range for a bad
  // option (max_epochs 0 or below -1, max_epochs -1 without max_steps, max_steps 0 or below -1,
  // a negative limit, val_check_interval not in (0, 1] nor an integer > 1, check_val_every_n_epoch,
  // accumulate_grad_batches or log_every_n_steps below 1, gradient_clip_val negative or not
  // finite, gradient_clip_algorithm not norm/value, precision not one of its names, a ProgressBar
  // among the callbacks with enable_progress_bar false, a ModelCheckpoint with enable_checkpointing
  // false, two callbacks of one state_key) or an unknown accelerator name (listing the valid ones),
  // DeviceUnavailable for an accelerator that can not run (listing those that can), ConfigError
  // when |devices| is more than the accelerator has.
  explicit Trainer(TrainerOptions options);

  Device& device() const { return *device_; }
  const TrainerOptions& options() const { return options_; }
  // The strategy the fit runs with, and Lightning's trainer.is_global_zero, world_size and
  // global_rank (from its process group; true, 1 and 0 for one process).
  Strategy& strategy() const { return *strategy_; }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  int world_size() const { return strategy_->world_size(); }
  int global_rank() const { return strategy_->global_rank(); }

  // Trains |module| on |train|, validating on |val| (when given) as val_check_interval and
  // check_val_every_n_epoch say, until max_epochs or max_steps is reached or should_stop is set.
  // The module is moved to the device first, then (with sync_batchnorm and several processes)
  // convert_sync_batchnorm, then Strategy::setup_module, then configure_optimizers is called.
  // With several processes (world_size() > 1): |train| is sharded with set_distributed(rank,
  // world_size, true) and |val| with set_distributed(rank, world_size, false) for the fit (both
  // back to one process at its end); every backward runs between Strategy::before_backward(sync)
  // and after_backward(sync), sync false for the batches of an accumulation that are not its
  // last; the epoch means of training metrics and the validation means are sums and weights
  // reduced across the processes; a non-finite loss or should_stop on any process stops every
  // process at the same batch; rank_zero_only callbacks run on global rank zero alone, and only
  // it writes checkpoints; samples/s is the job's. A checkpoint records the world size and the
  // epoch's global sample position: resuming with another world size at an epoch's end restarts
  // the epoch as the new processes shard it; within an epoch it (and a resume whose global batch
  // differs by the loader's batch_size()) goes on at the first global batch at or after that
  // position (a warning says how many samples are skipped), which needs the
  // loader's batch_size() (ConfigError naming the loader when it is 0). When fit throws,
  // Strategy::on_exception and teardown run before the exception propagates; at the end a
  // barrier, then teardown. With
  // |ckpt_path| the run continues from that checkpoint (load_checkpoint: every field is checked
  // first): the module's tensors, optimizer and scheduler state, epoch, step, position in the
  // epoch, history and callbacks' state, so that the result is bit-identical to an uninterrupted
  // run on the same device. A checkpoint that already reached max_epochs or max_steps leaves
  // nothing to train: fit calls on_fit_start and on_fit_end and trains nothing (the progress bar
  // says so). Throws InvalidArgument before training when |train| or |val| has no batches;
  // ConfigError for a bad OptimizerConfig, a val_check_interval of more batches than an epoch
  // has, or a monitored metric that was never logged (naming it and the logged ones); Error when
  // the training loss becomes NaN or infinite; the errors of load_checkpoint, of the module and of
  // the callbacks otherwise.
  void fit(LightningModule& module, DataLoader& train, DataLoader* val = nullptr,
           const std::filesystem::path& ckpt_path = {});
  // One validation run of |module| on |data| (evaluation mode, no gradients recorded): the
  // metrics it logged (epoch means). Throws InvalidArgument when |data| has no batches.
  std::map<std::string, double> validate(LightningModule& module, DataLoader& data);

  // For callbacks, valid during fit.
  LightningModule& module() const { return *module_; }
  Optimizer& optimizer() const { return *config_.optimizer; }
  LRScheduler* lr_scheduler() const { return config_.lr_scheduler.get(); }
  const TrainingProgress& progress() const { return progress_; }
  // Lightning's current_epoch (0-based: the epoch being trained, or the number done) and
  // global_step (optimizer steps).
  std::int64_t current_epoch() const { return progress_.epoch; }
  std::int64_t global_step() const { return progress_.global_step; }
  // The latest value of every metric: step values as read back, epoch means after each epoch,
  // validation means after each validation (Lightning's trainer.callback_metrics).
  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  // The value of |monitor| in callback_metrics; ConfigError naming |who|, the metric and the
  // logged ones when it was never logged (Lightning's MisconfigurationException).
  double monitored(const std::string& monitor, const std::string& who) const;
  bool has_validation() const { return val_ != nullptr; }
  bool resumed() const { return resumed_; }
  // The checkpoint this fit resumed from (empty when it did not); callbacks never write it.
  const std::filesystem::path& resumed_from() const { return resumed_from_; }
  // Whether fit has nothing to train (max_epochs or max_steps already reached).
  bool finished() const;
  // Writes a checkpoint of the fit's state now (for ModelCheckpoint); on the global-zero process
  // alone (elsewhere it does nothing).
  void save_checkpoint(const std::filesystem::path& path) const;
  double lr() const;
  // Lightning's trainer.estimated_stepping_batches: the optimizer steps this fit takes, for a
  // learning-rate schedule's length in configure_optimizers. max_steps where set; else max_epochs
  // x the training batches of an epoch (after limit_train_batches; with several processes, this
  // process's share, as fit has sharded the loader by then) / accumulate_grad_batches, rounded up
  // per epoch. Throws ConfigError before fit has started (the batches are not known), when
  // neither bound is set (max_epochs -1 without max_steps), or when the count overflows.
  std::int64_t estimated_stepping_batches() const;

  // Set (by EarlyStopping, or any callback) to end the fit after the current validation or
  // epoch.
  bool should_stop = false;

 private:
  struct Fit;
  void fit_loop(Fit& fit, LightningModule& module, DataLoader& train,
                const std::filesystem::path& ckpt_path);
  void resume(Fit& fit, const std::filesystem::path& ckpt_path);
  void restart_position(Fit& fit, const std::filesystem::path& ckpt_path);
  // The callbacks this process runs (rank_zero_only ones on global rank zero alone).
  std::vector<Callback*> callbacks() const;
  void run_validation(Fit& fit);
  std::map<std::string, double> validation_loop(LightningModule& module, DataLoader& data);
  void end_epoch(Fit& fit, bool completed);
  void record_row(MetricsRow row);

  TrainerOptions options_;
  std::shared_ptr<Strategy> strategy_;
  Device* device_ = nullptr;
  LightningModule* module_ = nullptr;
  DataLoader* val_ = nullptr;
  OptimizerConfig config_;
  TrainingProgress progress_;
  std::map<std::string, double> callback_metrics_;
  bool resumed_ = false;
  std::filesystem::path resumed_from_;
  std::int64_t fit_batches_ = 0;   // the training batches of an epoch of the latest fit (0: none)
  std::optional<DType> autocast_;  // from precision
  std::unique_ptr<GradScaler> scaler_;  // "16-mixed"
};

// The device an accelerator name and device count select, with the Trainer's errors.
Device& resolve_accelerator(const std::string& accelerator, int devices);

}  // namespace tessera::train
