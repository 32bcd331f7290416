// Training checkpoints: the model's parameters (named as its state_dict), the optimizer's state
// and where training stands, in one safetensors file written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/train/layers.h"
#include "tessera/train/optim.h"

namespace tessera::train {

// Per-epoch figures, as the CSV log and the plot show them.
struct EpochMetrics {
  int epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;  // NaN without a test set
  double seconds = 0;                       // training time of the epoch, evaluation excluded
  double samples_per_second = 0;
};

// Where a run stands after a completed epoch.
struct TrainingProgress {
  int epoch = 0;                  // epochs completed
  std::uint64_t global_step = 0;  // optimizer steps taken
  std::uint64_t seed = 0;
  std::vector<EpochMetrics> history;
};

// Writes "model" tensors under their parameter names, optimizer state under "optimizer.NAME",
// and |progress| plus the model and optimizer descriptions as metadata, atomically (a killed save
// leaves the old file or none, and the next save of |path| removes its leftover temporary file:
// tessera/file.h). Throws InvalidArgument naming |path| when |progress| is not a run's progress
// (see load_checkpoint), FileError when the file can not be written.
void save_checkpoint(const std::filesystem::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress);

// Loads a checkpoint into |model| (on the device of its parameters) and |optimizer|. Checks
// every field before changing anything; every message names |path| and the field:
// - FileError for a malformed file: unknown metadata; format not tessera-checkpoint-1; epoch,
//   global_step or seed not a non-negative integer in decimal digits that fits (int, uint64,
//   uint64; no sign, no spaces, no trailing characters); a history that is not one entry per
//   epoch done (epochs 1, 2, ... with every figure null or a non-negative number, accuracies at
//   most 1); fewer steps than epochs, or more than int64 holds; lr not a non-negative number; an
//   optimizer step count that differs from global_step.
// - InvalidArgument when it holds another model or optimizer: a parameter missing, of another
//   dtype or shape, or a tensor that is no parameter; the optimizer's name; optimizer state the
//   optimizer refuses (Optimizer::load_state: unknown entries, dtype or shape not the parameter's,
//   step counts that do not match the state).
// Not thread-safe with other uses of |model| and |optimizer|.
TrainingProgress load_checkpoint(const std::filesystem::path& path, Module& model,
                                 Optimizer& optimizer);

// The file name save_checkpoint uses for |epoch| in a checkpoint directory: epoch-0003.safetensors.
std::string checkpoint_name(int epoch);
// The decimal digits of the epoch in a checkpoint file name: "0003" for epoch-0003.safetensors
// (or "3" for a renamed epoch-3.safetensors); nullopt when |file_name| is not such a name.
std::optional<std::string_view> checkpoint_name_digits(std::string_view file_name);
// The checkpoint of the highest epoch in |dir| (files named epoch-N.safetensors), if any; nullopt
// when |dir| does not exist. Throws FileError naming the path when |dir| is not a directory or
// can not be listed, or a file's epoch number does not fit an int.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir);

}  // namespace tessera::train
