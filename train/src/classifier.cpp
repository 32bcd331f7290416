#include "tessera/train/classifier.h"

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {

namespace {

// The fraction of rows of |logits| whose argmax is |labels|' entry, as a device scalar (compared
// as f32, exact for class indices below 2^24: eq runs on f32).
Tensor accuracy(const Tensor& logits, const Tensor& labels) {
  return mean(cast(eq(cast(argmax(logits, 1), DType::f32), cast(labels, DType::f32)), DType::f32),
              0);
}

void require_batch(const TensorBatch& batch, const char* step) {
  if (batch.tensors.size() != 2)
    throw InvalidArgument(fmt::format(
        "ImageClassifier::{}: the batch has {} tensors; expected x [B, C, H, W] and y [B]", step,
        batch.tensors.size()));
}

}  // namespace

ImageClassifier::ImageClassifier(std::shared_ptr<Module> net, Configure configure)
    : net_(std::move(net)), configure_(std::move(configure)) {
  if (!net_) throw InvalidArgument("ImageClassifier: the network is null");
  const auto own_parameters = net_->named_parameters(false);
  const auto own_buffers = net_->named_buffers(false);
  if (!own_parameters.empty() || !own_buffers.empty())
    throw InvalidArgument(fmt::format(
        "ImageClassifier: the network {} has parameters or buffers of its own ('{}'), not in a "
        "child module; register them in a child module",
        net_->name(),
        own_parameters.empty() ? own_buffers.front().name : own_parameters.front().name));
  for (auto& [name, child] : net_->named_children()) register_module(name, child);
}

void ImageClassifier::train(bool on) {
  LightningModule::train(on);
  net_->train(on);
}

Variable ImageClassifier::training_step(const TensorBatch& batch, std::int64_t) {
  require_batch(batch, "training_step");
  const Variable logits = forward(Variable(batch[0]));
  Variable loss = cross_entropy(logits, batch[1]);
  LogOptions epoch_mean;
  epoch_mean.prog_bar = true;
  epoch_mean.on_step = false;
  epoch_mean.on_epoch = true;
  log("train_loss", loss, epoch_mean);
  log("train_acc", accuracy(logits.value(), batch[1]), epoch_mean);
  return loss;
}

void ImageClassifier::validation_step(const TensorBatch& batch, std::int64_t) {
  require_batch(batch, "validation_step");
  const Variable logits = forward(Variable(batch[0]));
  LogOptions bar;
  bar.prog_bar = true;
  log("val_loss", tessera::cross_entropy(logits.value(), batch[1]), bar);
  log("val_acc", accuracy(logits.value(), batch[1]), bar);
}

OptimizerConfig ImageClassifier::configure_optimizers() {
  if (configure_) return configure_(*net_);
  OptimizerConfig c;
  c.optimizer = std::make_shared<Adam>(net_->named_parameters(), AdamOptions{});
  return c;
}

}  // namespace tessera::train
