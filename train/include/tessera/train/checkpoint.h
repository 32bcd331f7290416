// Training checkpoints: the model's parameters (named as its state_dict), the optimizer's state
// and where training stands, in one safetensors file written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
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
// and |progress| plus the model and optimizer descriptions as metadata.
void save_checkpoint(const std::filesystem::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress);

// Loads a checkpoint into |model| (on the device of its parameters) and |optimizer|. Checks
// everything before changing anything: FileError for a malformed file, InvalidArgument naming the
// parameter or state that is missing or differs (another model or optimizer).
TrainingProgress load_checkpoint(const std::filesystem::path& path, Module& model,
                                 Optimizer& optimizer);

// The file name save_checkpoint uses for |epoch| in a checkpoint directory: epoch-0003.safetensors.
std::string checkpoint_name(int epoch);
// The checkpoint of the highest epoch in |dir|, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir);

}  // namespace tessera::train
