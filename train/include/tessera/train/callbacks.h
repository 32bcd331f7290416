// The Trainer's standard callbacks (Lightning's TQDMProgressBar, CSVLogger, ModelCheckpoint),
// and a loss/accuracy plot.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "tessera/train/trainer.h"

namespace tessera::train {

// A progress bar with loss, samples/s and time left when |out| is a terminal; plain lines (one
// per epoch, and one every ~10% of an epoch) otherwise. The Trainer adds one on stdout unless
// TrainerOptions::enable_progress_bar is false. At the start it names the device, the checkpoint
// resumed from, and says when there is nothing to train (max_epochs already reached).
class ProgressBar final : public Callback {
 public:
  explicit ProgressBar(std::FILE* out = stdout);
  void on_fit_start(Trainer& t) override;
  void on_train_progress(Trainer& t, const StepProgress& p) override;
  void on_epoch_end(Trainer& t, const EpochMetrics& m) override;

 private:
  std::FILE* out_;
  bool tty_;
  std::int64_t last_decile_ = -1;
};

// Per-epoch metrics as CSV: epoch, train_loss, train_accuracy, test_loss, test_accuracy,
// seconds, samples_per_second. The whole file is rewritten atomically after every epoch from the
// trainer's history (which a resumed run restores), so it never holds a torn line. The
// constructor creates the file's directory and checks that a file can be written there, throwing
// FileError naming the path (a directory, an unwritable or uncreatable directory).
class CsvLogger final : public Callback {
 public:
  explicit CsvLogger(std::filesystem::path path);
  void on_epoch_end(Trainer& t, const EpochMetrics& m) override;

 private:
  std::filesystem::path path_;
};

// Writes DIR/epoch-NNNN.safetensors after every epoch (checkpoint.h). The constructor creates
// |dir| and checks that a file can be written in it (a probe file, removed again), throwing
// FileError naming |dir| when it is a file or can not be created or written, so a bad directory
// is found before training. It never writes over the checkpoint the fit resumed from: a fit
// whose epochs would (the resumed file is DIR/epoch-0003.safetensors but holds epoch 2) is
// refused in on_fit_start with a FileError naming the file, before any training.
class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(std::filesystem::path dir);
  void on_fit_start(Trainer& t) override;
  void on_epoch_end(Trainer& t, const EpochMetrics& m) override;

 private:
  std::filesystem::path dir_;
};

// Draws loss and accuracy curves (train and test) into an image with gnuplot after every epoch;
// the format follows the extension (.png, .svg, .pdf). The constructor checks that gnuplot runs
// and throws ConfigError with the install command when it does not, and FileError as CsvLogger's
// when the file can not be written.
class LossPlot final : public Callback {
 public:
  explicit LossPlot(std::filesystem::path path);
  void on_epoch_end(Trainer& t, const EpochMetrics& m) override;

 private:
  std::filesystem::path path_;
  std::string terminal_;
};

}  // namespace tessera::train
