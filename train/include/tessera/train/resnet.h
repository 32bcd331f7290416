// He et al.'s CIFAR ResNet (Deep Residual Learning for Image Recognition, 2016, section 4.2) as
// bench/models_peer.py's PyTorch twin defines it: the same modules, state_dict keys, layouts and
// initial distributions, so that a Tessera state dict loads into the twin with
// load_state_dict(strict=True) and the other way round (docs/models.md).
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/train/layers.h"

namespace tessera::train {

// Two 3x3 convolutions (no bias) with BatchNorm2d: relu(bn2(conv2(relu(bn1(conv1(x))))) +
// shortcut(x)). The shortcut is the identity, or, where the block changes the resolution or the
// width, the paper's option A: x[:, :, ::stride, ::stride] with (planes - in_planes) zero
// channels, (planes - in_planes) / 2 before the input's and the rest after (no parameters).
// Children conv1, bn1, conv2, bn2 (the twin's names). Weights from |gen| (nullptr:
// default_init_generator()): convolutions kaiming_normal(mode="fan_out", nonlinearity="relu"),
// BatchNorm 1 / 0. Throws InvalidArgument for non-positive sizes or stride, or planes < in_planes.
class BasicBlock : public Module {
 public:
  BasicBlock(std::int64_t in_planes, std::int64_t planes, int stride = 1, Generator* gen = nullptr);
  // [N, in_planes, H, W] -> [N, planes, ceil(H / stride), ceil(W / stride)].
  Variable forward(const Variable& x) override;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Conv2d> conv2;
  std::shared_ptr<BatchNorm2d> bn2;

 private:
  Variable shortcut(const Variable& x) const;
  std::int64_t in_planes_, planes_;
  int stride_;
};

struct ResNetOptions {
  int depth = 20;        // 6n + 2: 8, 14, 20, 32, 44, 56, 110
  int num_classes = 10;  // outputs of fc
  int in_channels = 1;   // 1 for Fashion-MNIST, 3 for CIFAR-10
  int width = 16;        // channels of the stem and the first stage (the stages: w, 2w, 4w)
};

// ResNet-(6n+2): conv1 (3x3, in_channels -> width, no bias), bn1, relu; layer1, layer2, layer3
// (Sequentials of n BasicBlocks of width, 2 width and 4 width channels; the first blocks of
// layer2 and layer3 have stride 2); global average pooling, flatten, fc (Linear(4 width,
// num_classes), torch's default init). forward: [N, in_channels, H, W] f32 -> logits
// [N, num_classes]. state_dict keys as the twin's: conv1.weight, bn1.{weight, bias, running_mean,
// running_var, num_batches_tracked}, layerS.B.{conv1, bn1, conv2, bn2}..., fc.{weight, bias}.
// Throws InvalidArgument naming the depth when it is not 6n + 2 with n >= 1, and for
// non-positive num_classes, in_channels or width.
class ResNet : public Module {
 public:
  explicit ResNet(ResNetOptions options = {}, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override { return ""; }
  const ResNetOptions& options() const { return options_; }

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3;
  std::shared_ptr<Linear> fc;

 private:
  ResNetOptions options_;
};

}  // namespace tessera::train
