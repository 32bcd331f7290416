// The Trainer: Lightning's Trainer(accelerator=..., devices=..., max_epochs=...) for Tessera.
// It picks the device, moves the model there, runs the epochs (forward, cross-entropy,
// backward, optimizer step), evaluates after each epoch, and tells its callbacks (progress bar,
// CSV log, checkpoints, plot: callbacks.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/train/checkpoint.h"
#include "tessera/train/data.h"
#include "tessera/train/layers.h"
#include "tessera/train/optim.h"

namespace tessera::train {

class Trainer;

// Training progress within an epoch, reported every TrainerOptions::log_every_n_steps steps.
struct StepProgress {
  int epoch = 0;  // 1-based
  int max_epochs = 0;
  std::int64_t batch = 0, num_batches = 0;  // batches done in this epoch, of
  std::int64_t samples = 0;                 // samples done in this epoch
  double loss = 0;                          // mean loss of the batches read back so far
  double seconds = 0;                       // since the epoch started
};

// Hooks into a fit. Called on the training thread; an exception stops the fit and propagates.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_start(Trainer&) {}
  virtual void on_train_progress(Trainer&, const StepProgress&) {}
  virtual void on_epoch_end(Trainer&, const EpochMetrics&) {}
  virtual void on_fit_end(Trainer&) {}
};

struct TrainerOptions {
  // "auto" (TESSERA_DEVICE when set, else the best device), a plugin name ("cpu", "vulkan",
  // "opencl", or any loaded plugin's), or one device ("vulkan:1").
  std::string accelerator = "auto";
  int devices = 1;  // how many devices of the accelerator; one is supported
  int max_epochs = 10;
  std::int64_t batch_size = 128;
  std::uint64_t seed = 0;
  std::int64_t limit_train_batches = 0;  // 0: all
  std::int64_t limit_test_batches = 0;   // 0: all
  int log_every_n_steps = 16;            // metrics are read back from the device this often
  // Lightning's enable_progress_bar: when no ProgressBar is among |callbacks|, the Trainer adds
  // one on stdout (a bar on a terminal, one line per epoch otherwise). false: no progress output.
  bool enable_progress_bar = true;
  std::vector<std::shared_ptr<Callback>> callbacks;
};

// Loss and accuracy over a dataset.
struct EvalResult {
  double loss = 0, accuracy = 0;
  std::int64_t samples = 0;
};

// One Trainer runs one fit at a time on the thread that calls it.
class Trainer {
 public:
  // Resolves the device now. Throws ConfigError for an unknown accelerator name (listing the
  // valid ones) or a bad option (max_epochs or batch_size below 1, a negative limit, a
  // ProgressBar among the callbacks with enable_progress_bar false), DeviceUnavailable for an
  // accelerator that can not run (listing those that can), ConfigError when |devices| is more
  // than the accelerator has.
  explicit Trainer(TrainerOptions options);

  Device& device() const { return *device_; }
  const TrainerOptions& options() const { return options_; }

  // Trains |model| on |train| with |optimizer| (built over model's parameters) for the epochs
  // left until max_epochs, evaluating on |test| (when given) after each. With |ckpt_path| the
  // run continues from that checkpoint (load_checkpoint: every field is checked first):
  // parameters, optimizer state, epoch, step, seed and history, so that the result is
  // bit-identical to an uninterrupted run on the same device. A checkpoint that already reached
  // max_epochs leaves nothing to train: fit calls on_fit_start and on_fit_end, trains nothing and
  // says so (the progress bar prints it; the log at info level). Throws InvalidArgument before
  // training when |train| or |test| has no samples; the errors of load_checkpoint and of the
  // callbacks otherwise.
  void fit(Module& model, Optimizer& optimizer, const Dataset& train, const Dataset* test = nullptr,
           const std::filesystem::path& ckpt_path = {});
  // Loss and accuracy of |model| on |data| (evaluation mode, no gradients). Throws
  // InvalidArgument naming the dataset when it has no samples: an accuracy of nothing is not 0%.
  EvalResult evaluate(Module& model, const Dataset& data);

  // For callbacks, valid during fit.
  Module& model() const { return *model_; }
  Optimizer& optimizer() const { return *optimizer_; }
  const TrainingProgress& progress() const { return progress_; }
  bool resumed() const { return resumed_; }
  // The checkpoint this fit resumed from (empty when it did not); callbacks never write it.
  const std::filesystem::path& resumed_from() const { return resumed_from_; }

 private:
  TrainerOptions options_;
  Device* device_ = nullptr;
  Module* model_ = nullptr;
  Optimizer* optimizer_ = nullptr;
  TrainingProgress progress_;
  bool resumed_ = false;
  std::filesystem::path resumed_from_;
};

// One optimisation step on a batch: forward, cross-entropy against i32 |labels|, backward and
// the optimizer's update (gradients zeroed first). The results are still being computed on the
// device when it returns; reading them waits. Used by Trainer::fit and tessera-bench.
struct StepResult {
  Variable loss, logits;
};
StepResult training_step(Module& model, Optimizer& optimizer, const Tensor& x,
                         const Tensor& labels);

// The device an accelerator name and device count select, with the Trainer's errors.
Device& resolve_accelerator(const std::string& accelerator, int devices);

}  // namespace tessera::train
