// Training checkpoints: the model's state_dict (parameters and buffers, under their PyTorch
// names), the optimizer's and the scheduler's state, where training stands (epoch, step, the
// position within an epoch), the metrics history and the callbacks' state, in one safetensors
// file written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/train/layers.h"
#include "tessera/train/optim.h"

namespace tessera::train {

class LRScheduler;

// One row of the metrics history (the CSV log and the plot): written after every validation and
// at the end of every epoch (one row when both happen at one step).
struct MetricsRow {
  std::int64_t epoch = 0;                 // the 1-based epoch the row belongs to
  std::int64_t step = 0;                  // global_step when it was written
  double lr = 0;                          // the learning rate of the optimizer's first group then
  std::map<std::string, double> metrics;  // logged epoch metrics, validation metrics (NaN: none)
  double seconds = 0;             // training time of the epoch so far (NaN in validation rows)
  double samples_per_second = 0;  // (NaN in validation rows)
};

// A running weighted sum of a metric over the batches of an epoch so far.
struct MetricSum {
  double sum = 0, weight = 0;
};

// Where a run stands.
struct TrainingProgress {
  std::int64_t epoch = 0;         // epochs completed
  std::int64_t epoch_batch = 0;   // batches done of the next epoch (a checkpoint within an epoch)
  std::int64_t global_step = 0;   // optimizer steps taken
  std::int64_t batches_seen = 0;  // training batches run in all (Dropout's masks derive from it)
  std::uint64_t seed = 0;
  // The processes that trained (a file without it: 1), and the samples of the epoch under way
  // that the whole job had trained when the checkpoint was taken (the global batches done; 0 at
  // an epoch's end; -1 when a file of one process does not say). Resuming with another number of
  // processes continues from it (Trainer::fit).
  int world_size = 1;
  std::int64_t epoch_sample = 0;
  std::vector<MetricsRow> history;
  // Within an epoch: the sums of its on-epoch metrics so far, and of the training loss.
  std::map<std::string, MetricSum> epoch_sums;
  MetricSum epoch_loss;
  // Each stateful callback's state (Callback::state_key -> Callback::state_dict).
  std::map<std::string, std::map<std::string, std::string>> callbacks;
  // The loss scaler's state (GradScaler::state_dict) of a "16-mixed" run; empty: none.
  std::map<std::string, std::string> grad_scaler;
};

// Writes the model's tensors under their state_dict names, optimizer state under
// "optimizer.NAME", scheduler state as metadata "scheduler.KEY", and |progress| plus the model's
// and optimizer's descriptions as metadata, atomically (a killed save leaves the old file or
// none, and the next save of |path| removes its leftover temporary file: tessera/file.h). Throws
// InvalidArgument naming |path| when |progress| is not a run's progress (see load_checkpoint),
// FileError when the file can not be written.
void save_checkpoint(const std::filesystem::path& path, Module& model, const Optimizer& optimizer,
                     const TrainingProgress& progress, const LRScheduler* scheduler = nullptr);

// Loads a checkpoint into |model| (on the device of its tensors), |optimizer| and |scheduler|
// (which must be given exactly when the checkpoint holds scheduler state). Checks every field
// before changing anything; every message names |path| and the field:
// - FileError for a malformed file: unknown metadata; format not tessera-checkpoint-2; epoch,
//   epoch_batch, global_step, batches_seen, seed or epoch_sample (optional) not a non-negative
//   integer, world_size (optional, 1 when absent) not a positive one in decimal digits
//   that fits (no sign, no spaces, no trailing characters); a history that is not rows of
//   non-decreasing epoch and step with finite or null figures; fewer training batches than
//   steps; lr not a non-negative number; an optimizer step count that differs from global_step;
//   callback state or epoch sums that are not JSON objects of strings / number pairs; loss-scaler
//   state (optional) that GradScaler::check_state refuses.
// - InvalidArgument when it holds another model, optimizer or scheduler: a tensor missing, of
//   another dtype or shape, or one the model does not have; the optimizer's name; optimizer or
//   scheduler state they refuse; scheduler state without a scheduler or the reverse.
// Not thread-safe with other uses of |model| and |optimizer|.
TrainingProgress load_checkpoint(const std::filesystem::path& path, Module& model,
                                 Optimizer& optimizer, LRScheduler* scheduler = nullptr);

// The file name of epoch |epoch|'s checkpoint in a checkpoint directory: epoch-0003.safetensors.
std::string checkpoint_name(std::int64_t epoch);
// The decimal digits of the epoch in a checkpoint file name: "0003" for epoch-0003.safetensors
// (or "3" for a renamed epoch-3.safetensors); nullopt when |file_name| is not such a name.
std::optional<std::string_view> checkpoint_name_digits(std::string_view file_name);
// The checkpoint of the highest epoch in |dir| (files named epoch-N.safetensors), if any; nullopt
// when |dir| does not exist. Throws FileError naming the path when |dir| is not a directory or
// can not be listed, or a file's epoch number does not fit an int.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir);

}  // namespace tessera::train
