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
};

}  // namespace tessera::train
