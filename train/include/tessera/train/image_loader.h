// ImageDataLoader: a DataLoader (data_loader.h) over an image Dataset, for the Trainer.
#pragma once

#include <cstdint>

#include "tessera/train/data.h"
#include "tessera/train/data_loader.h"

namespace tessera::train {

// Batches of |data| as BatchLoader makes them (shuffled per epoch from options.seed, normalised,
// prepared ahead on a background thread): tensors x [B, 1, rows, cols] f32 and y [B] i32, on
// the CPU device (the Trainer moves them to its own). |data| must outlive the loader. Throws
// what BatchLoader's constructor throws (InvalidArgument for a batch size below 1 or a malformed
// dataset), and InvalidArgument naming the dataset when it has no samples.
class ImageDataLoader final : public DataLoader {
 public:
  ImageDataLoader(const Dataset& data, LoaderOptions options);
  std::int64_t num_batches() const override { return loader_.num_batches(); }
  std::int64_t num_samples() const override { return loader_.num_samples(); }
  void begin_epoch(std::int64_t epoch) override { loader_.begin_epoch(epoch); }
  // As BatchLoader's: DistributedSampler's shares of each epoch (data_loader.h).
  void set_distributed(int rank, int world_size, bool pad_to_equal) override {
    loader_.set_distributed(rank, world_size, pad_to_equal);
  }
  std::int64_t batch_size() const override { return loader_.batch_size(); }
  bool next(TensorBatch& out) override;
  const Dataset& dataset() const { return loader_.dataset(); }

 private:
  BatchLoader loader_;
  Batch batch_;
};

}  // namespace tessera::train
