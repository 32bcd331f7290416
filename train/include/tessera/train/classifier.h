// ImageClassifier: a LightningModule (lightning.h) that trains any image network with
// cross-entropy, as a Lightning user writes one for MNIST: tessera-train's mlp/cnn path.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessera/train/lightning.h"

namespace tessera::train {

class ImageClassifier : public LightningModule {
 public:
  // Builds the optimizer (and scheduler) over the network's parameters; called by
  // configure_optimizers.
  using Configure = std::function<OptimizerConfig(Module& net)>;

  // Wraps |net| (logits [B, classes] from images [B, C, H, W]). The classifier registers the
  // network's children as its own, under their names, so that its state_dict is the network's
  // (no "net." prefix: checkpoints and weights files load into |net|, or its PyTorch twin, as
  // they are). |configure| null: Adam with lr 1e-3 (torch.optim.Adam's defaults). Throws
  // InvalidArgument when |net| is null or holds parameters or buffers of its own (not in a child
  // module): wrap those in a module of their own.
  explicit ImageClassifier(std::shared_ptr<Module> net, Configure configure = nullptr);

  Variable forward(const Variable& x) override { return (*net_)(x); }
  std::string describe() const override { return net_->describe(); }
  void train(bool on = true) override;

  // Batch: x [B, C, H, W] f32, y [B] i32 (ImageDataLoader's). Returns the cross-entropy and
  // logs train_loss and train_acc (epoch means, on the progress bar).
  Variable training_step(const TensorBatch& batch, std::int64_t batch_idx) override;
  // Logs val_loss and val_acc (epoch means).
  void validation_step(const TensorBatch& batch, std::int64_t batch_idx) override;
  OptimizerConfig configure_optimizers() override;

  Module& net() { return *net_; }

 private:
  std::shared_ptr<Module> net_;
  Configure configure_;
};

}  // namespace tessera::train
