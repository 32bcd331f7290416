// LightningModule: a model that says how it trains (Lightning's pl.LightningModule). The model
// computes its loss in training_step and returns it; the Trainer (trainer.h) does everything
// else: zero_grad, backward (scaled by 1/accumulate_grad_batches), gradient clipping, the
// optimizer's and the scheduler's steps, validation, logging, checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tessera/train/autograd.h"
#include "tessera/train/data_loader.h"
#include "tessera/train/layers.h"
#include "tessera/train/optim.h"

namespace tessera::train {

class Trainer;
class LRScheduler;  // lr_scheduler.h
class MetricCollector;
struct TrainerAccess;

// What configure_optimizers returns (Lightning's {"optimizer": ..., "lr_scheduler": {"scheduler":
// ..., "interval": ...}}). |lr_scheduler| may be null. |interval| "step": the scheduler steps
// after every optimizer step; "epoch": after every training epoch (after its validation), as in
// Lightning. The Trainer throws ConfigError naming the field when |optimizer| is null or
// |interval| is another word.
struct OptimizerConfig {
  std::shared_ptr<Optimizer> optimizer;
  std::shared_ptr<LRScheduler> lr_scheduler;
  std::string interval = "step";
};

// Options of LightningModule::log, as Lightning's self.log(name, value, prog_bar=..., ...).
// on_step / on_epoch default as Lightning's: in training_step on_step=true, on_epoch=false; in
// validation_step on_step=false, on_epoch=true. A metric logged with both is recorded as
// NAME_step and NAME_epoch (Lightning's names). On epoch, values are averaged over the batches of
// the epoch (or of the validation run), weighted by |batch_size| (0: the batch's size).
struct LogOptions {
  bool prog_bar = false;
  std::optional<bool> on_step, on_epoch;
  std::int64_t batch_size = 0;
};

// Subclass it, register the layers as in any Module, and override the three steps. Not
// thread-safe; one Trainer uses it at a time.
class LightningModule : public Module {
 public:
  // The loss of one training batch, a one-element Variable that requires grad. The Trainer
  // calls backward on it (scaled by 1/accumulate_grad_batches) and steps the optimizer.
  virtual Variable training_step(const TensorBatch& batch, std::int64_t batch_idx) = 0;
  // One validation batch (evaluation mode, no gradients recorded); log() what to measure.
  virtual void validation_step(const TensorBatch& batch, std::int64_t batch_idx);
  // The optimizer (over this module's parameters) and an optional scheduler; called once per
  // fit, after the module was moved to the Trainer's device.
  virtual OptimizerConfig configure_optimizers() = 0;

  // Records a metric (Lightning's self.log). |value| is a one-element tensor, usually still being
  // computed on the device: it is not read back at once, but with the others every
  // log_every_n_steps steps and at the end of an epoch or validation run, so logging never makes
  // the host wait for the device each step. Outside a fit or validate it does nothing (as
  // Lightning's, which warns). Throws InvalidArgument naming the metric for an empty name or a
  // tensor of more than one element.
  void log(const std::string& name, const Variable& value, LogOptions options = {});
  void log(const std::string& name, const Tensor& value, LogOptions options = {});
  void log(const std::string& name, double value, LogOptions options = {});

  // What rebuilds this module (Lightning's hparams, saved in checkpoints as
  // "hyper_parameters"): save_checkpoint writes each entry as metadata "hparams.KEY"; empty by
  // default. LanguageModel's holds the GPT's configuration and vocabulary (tessera-generate).
  virtual std::map<std::string, std::string> hyperparameters() const { return {}; }

  // The Trainer running this module (nullptr outside fit/validate).
  Trainer* trainer() const { return trainer_; }

 private:
  friend class Trainer;
  friend struct TrainerAccess;
  Trainer* trainer_ = nullptr;
  MetricCollector* metrics_ = nullptr;
};

}  // namespace tessera::train
