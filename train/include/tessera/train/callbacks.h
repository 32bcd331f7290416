// The Trainer's standard callbacks: Lightning's TQDMProgressBar, CSVLogger, ModelCheckpoint and
// EarlyStopping, and a plot of the logged curves.
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tessera/train/trainer.h"

namespace tessera::train {

// A progress bar with the loss, the metrics logged with prog_bar, the learning rate, samples/s
// and time left when |out| is a terminal; plain lines (one every ~10% of an epoch, one per epoch
// with its metrics) otherwise. The Trainer adds one on stdout unless
// TrainerOptions::enable_progress_bar is false. At the start it names the device, the checkpoint
// resumed from, and says when there is nothing to train (max_epochs or max_steps reached).
class ProgressBar final : public Callback {
 public:
  explicit ProgressBar(std::FILE* out = stdout);
  void on_fit_start(Trainer& t) override;
  void on_train_progress(Trainer& t, const StepProgress& p) override;
  void on_validation_end(Trainer& t) override;
  void on_train_epoch_end(Trainer& t) override;
  bool rank_zero_only() const override { return true; }

 private:
  std::FILE* out_;
  bool tty_;
  std::int64_t last_decile_ = -1;
};

// The metrics history as CSV (Lightning's CSVLogger, one row per epoch and per validation
// within an epoch): epoch, step, lr, every logged metric (sorted by name; empty where a row has
// none), seconds, samples_per_second. The whole file is rewritten atomically from the trainer's
// history (which a resumed run restores) after every epoch and validation, so it never holds a
// torn line. The constructor creates the file's directory and checks that a file can be written
// there, throwing FileError naming the path (a directory, an unwritable or uncreatable
// directory).
class CsvLogger final : public Callback {
 public:
  explicit CsvLogger(std::filesystem::path path);
  void on_validation_end(Trainer& t) override;
  void on_train_epoch_end(Trainer& t) override;
  bool rank_zero_only() const override { return true; }

 private:
  std::filesystem::path path_;
};

struct ModelCheckpointOptions {
  std::filesystem::path dirpath;  // empty: TrainerOptions::default_root_dir / "checkpoints"
  // The file name without ".safetensors": {epoch} (the 1-based epoch the checkpoint was taken
  // in; Lightning's is 0-based), {step} (global_step) and {METRIC} (a logged metric), each with an
  // optional fmt format spec: "epoch-{epoch:04}", "best-{step}-{val_loss:.4f}".
  std::string filename = "epoch-{epoch:04}";
  std::string monitor;       // "": keep the latest save_top_k checkpoints
  std::string mode = "min";  // "min" or "max": which values of |monitor| are better
  int save_top_k = 1;        // -1: keep all; 0: none (only last / best_weights)
  bool save_last = false;    // also write last.safetensors at every save
  // A file name in |dirpath| for the weights only (the module's state_dict, as save(module,
  // path)) of the best checkpoint so far (monitor required), rewritten when the best changes:
  // what inference loads. "": none.
  std::string best_weights;
};

// Lightning's ModelCheckpoint: after every validation (or after every training epoch when the fit
// has no validation loader) it writes a checkpoint (checkpoint.h) named by |filename|, keeps the
// save_top_k best by |monitor| (or the latest save_top_k without one) and deletes the others it
// wrote; its best files survive a resume (state in the checkpoint). It never writes over the
// checkpoint the fit resumed from (FileError naming the file; with the default filename a fit
// whose epochs would is refused in on_fit_start, before any training). The constructor creates
// |dirpath| and checks that a file can be written there (FileError naming it), and throws
// ConfigError for a mode other than min/max, save_top_k below -1, a filename with unbalanced
// braces or empty, best_weights without monitor. A |monitor| never logged is a ConfigError at the
// first save naming it and the logged metrics.
class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options);
  // Every epoch's checkpoint in |dir| (epoch-NNNN.safetensors, save_top_k -1): tessera-train's.
  explicit ModelCheckpoint(std::filesystem::path dir);

  void on_fit_start(Trainer& t) override;
  void on_validation_end(Trainer& t) override;
  void on_train_epoch_end(Trainer& t) override;
  std::string state_key() const override;
  std::map<std::string, std::string> state_dict() const override;
  void load_state_dict(const std::map<std::string, std::string>& state) override;

  const std::filesystem::path& dirpath() const { return options_.dirpath; }
  // The best checkpoint so far and its score (empty / NaN before the first save or without
  // monitor); every kept checkpoint with its score (NaN without monitor).
  const std::filesystem::path& best_model_path() const { return best_path_; }
  double best_model_score() const { return best_score_; }
  const std::map<std::filesystem::path, double>& best_k_models() const { return best_k_; }
  const std::filesystem::path& last_model_path() const { return last_path_; }

 private:
  void save(Trainer& t);
  bool better(double a, double b) const;

  ModelCheckpointOptions options_;
  std::map<std::filesystem::path, double> best_k_;
  std::vector<std::filesystem::path> order_;  // kept files in the order they were written
  std::filesystem::path best_path_, last_path_;
  double best_score_;
};

struct EarlyStoppingOptions {
  std::string monitor;       // required
  double min_delta = 0;      // an improvement must be more than this
  int patience = 3;          // checks without improvement before stopping
  std::string mode = "min";  // "min" or "max"
  bool check_finite = true;  // stop when the metric becomes NaN or infinite
};

// Lightning's EarlyStopping: after every validation (or training epoch without validation)
// compares |monitor| with the best so far; after |patience| checks without an improvement of more
// than min_delta it sets Trainer::should_stop. Its wait count and best score are checkpointed.
// The constructor throws ConfigError for an empty monitor, a mode other than min/max, a negative
// patience or min_delta; a monitor never logged is a ConfigError at the first check naming it and
// the logged metrics.
class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  void on_validation_end(Trainer& t) override;
  void on_train_epoch_end(Trainer& t) override;
  std::string state_key() const override;
  std::map<std::string, std::string> state_dict() const override;
  void load_state_dict(const std::map<std::string, std::string>& state) override;

  int wait_count() const { return wait_; }
  double best_score() const { return best_; }
  // The epoch (1-based) in which it stopped the fit; 0 when it did not.
  std::int64_t stopped_epoch() const { return stopped_epoch_; }

 private:
  void check(Trainer& t);

  EarlyStoppingOptions options_;
  int wait_ = 0;
  double best_;
  std::int64_t stopped_epoch_ = 0;
};

// Draws the logged curves into an image with gnuplot after every epoch: the metrics whose names
// hold "loss" on the left, those that hold "acc" on the right (in %), against the step; the
// format follows the extension (.png, .svg, .pdf). The constructor checks that gnuplot runs and
// throws ConfigError with the install command when it does not, and FileError as CsvLogger's when
// the file can not be written.
class LossPlot final : public Callback {
 public:
  explicit LossPlot(std::filesystem::path path);
  void on_train_epoch_end(Trainer& t) override;
  bool rank_zero_only() const override { return true; }

 private:
  std::filesystem::path path_;
  std::string terminal_;
};

}  // namespace tessera::train
