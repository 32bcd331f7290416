// What the Trainer iterates: batches of tensors of any dtypes and shapes, so that any model and
// any loss train through it (Lightning's DataLoader, whose batches reach training_step as they
// come). A loader prepares batches on the host; the Trainer moves them to its device.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::train {

// One batch. |tensors| in the order the loader documents (images: x, y; text: x, y); |size| is
// the number of samples in it (the first dimension of its tensors), the weight of its metrics in
// an epoch's mean; |index| its position within the epoch.
struct TensorBatch {
  std::vector<Tensor> tensors;
  std::int64_t size = 0;
  std::int64_t index = 0;

  const Tensor& operator[](std::size_t i) const { return tensors.at(i); }
};

// A source of batches, epoch by epoch. One consumer thread. An epoch's batches are a pure
// function of the loader's seed and the epoch number, so that a resumed run sees what an
// uninterrupted one would have seen.
class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Batches in one epoch (after any limit).
  virtual std::int64_t num_batches() const = 0;
  // Samples in one epoch (after any limit).
  virtual std::int64_t num_samples() const = 0;
  // Starts epoch |epoch| (1-based) from its first batch.
  virtual void begin_epoch(std::int64_t epoch) = 0;
  // The next batch of the epoch, or false at its end. Rethrows what preparing it threw.
  virtual bool next(TensorBatch& out) = 0;

  // Distributed sampling, as PyTorch's DistributedSampler (which Lightning puts in for DDP):
  // after this call the loader yields process |rank|'s share of each epoch for |world_size|
  // processes (the samples at positions rank, rank + world_size, ... of the epoch's order), and
  // num_batches() and num_samples() count that share. The batch size stays the per-process size,
  // so the global batch is batch size x world_size, and the union of the ranks' batch i is
  // exactly batch i of one process with the global batch size and the same seed.
  // |pad_to_equal| (training): an epoch that does not divide by world_size is padded by repeating
  // its first samples, so every rank runs the same number of batches (DistributedSampler's
  // default). false (validation): no padding; ranks may differ by one sample, and metrics summed
  // over ranks count every sample once. set_distributed(0, 1, ...) restores the single-process
  // behaviour. Takes effect at the next begin_epoch. Throws InvalidArgument for a rank outside
  // [0, world_size) or world_size < 1; the default implementation throws ConfigError naming the
  // loader type (a loader that can not be sharded must be sharded by its author).
  virtual void set_distributed(int rank, int world_size, bool pad_to_equal);

  // The samples of a full batch of this process (after set_distributed: the per-process size),
  // or 0 when the loader does not say. Resuming within an epoch with another number of processes
  // needs it (Trainer::fit).
  virtual std::int64_t batch_size() const { return 0; }
};

// For implementations of DataLoader::set_distributed: throws its InvalidArgument for a rank
// outside [0, world_size) or world_size < 1.
void check_distributed(int rank, int world_size);

// The positions of an epoch of |n| that process |rank| of |world_size| takes, as
// DistributedSampler: ceil(n / world_size) when |pad_to_equal|, else those at rank,
// rank + world_size, ... below n.
std::int64_t distributed_share(std::int64_t n, int rank, int world_size, bool pad_to_equal);

}  // namespace tessera::train
