// ResNet for CIFAR-sized images (resnet.h), as bench/models_peer.py's twin.
#include <cmath>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train/init.h"
#include "tessera/train/resnet.h"

namespace tessera::train {

namespace {

// A 3x3 convolution without bias, padding 1, initialised as the twin's
// kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / (out * 9)).
std::shared_ptr<Conv2d> conv3x3(std::int64_t in, std::int64_t out, int stride, Generator& g) {
  auto c = std::make_shared<Conv2d>(in, out, 3, stride, 1, 1, 1, /*bias=*/false,
                                    Init::torch_default, &g);
  const Shape shape = c->weight.shape();
  const float std = static_cast<float>(std::sqrt(2.0 / static_cast<double>(out * 9)));
  c->weight.set_value(init::normal(shape, 0.0f, std, g, &c->weight.value().device()));
  return c;
}

}  // namespace

BasicBlock::BasicBlock(std::int64_t in_planes, std::int64_t planes, int stride, Generator* gen)
    : in_planes_(in_planes), planes_(planes), stride_(stride) {
  if (in_planes <= 0 || planes < in_planes || stride <= 0)
    throw InvalidArgument(fmt::format(
        "BasicBlock(in_planes={}, planes={}, stride={}): sizes and stride must be positive and "
        "planes at least in_planes (the option-A shortcut only adds channels)",
        in_planes, planes, stride));
  Generator& g = gen ? *gen : default_init_generator();
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride, g));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1, g));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
}

Variable BasicBlock::shortcut(const Variable& x) const {
  if (stride_ == 1 && planes_ == in_planes_) return x;
  Variable y = x;
  if (stride_ != 1) {
    y = slice(y, 2, 0, y.shape()[2], stride_);
    y = slice(y, 3, 0, y.shape()[3], stride_);
  }
  const std::int64_t pad = planes_ - in_planes_;
  if (pad == 0) return y;
  const Shape& s = y.shape();
  std::vector<Variable> parts;
  Device& device = x.value().device();
  auto zeros = [&](std::int64_t c) {
    return Variable(Tensor::full(Shape{s[0], c, s[2], s[3]}, 0.0, x.value().dtype(), &device));
  };
  if (pad / 2 > 0) parts.push_back(zeros(pad / 2));
  parts.push_back(y);
  parts.push_back(zeros(pad - pad / 2));
  return cat(parts, 1);
}

Variable BasicBlock::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.rank() != 4 || s[1] != in_planes_)
    throw InvalidArgument(
        fmt::format("{}: expects input [N, {}, H, W], got {}", describe(), in_planes_, s.str()));
  Variable out = relu((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  return relu(add(out, shortcut(x)));
}

ResNet::ResNet(ResNetOptions options, Generator* gen) : options_(options) {
  const int depth = options.depth;
  if (depth < 8 || (depth - 2) % 6 != 0)
    throw InvalidArgument(fmt::format(
        "ResNet: depth {}: a CIFAR ResNet has depth 6n+2 with n >= 1 (8, 14, 20, 32, 44, 56, 110)",
        depth));
  if (options.num_classes <= 0 || options.in_channels <= 0 || options.width <= 0)
    throw InvalidArgument(
        fmt::format("ResNet: num_classes ({}), in_channels ({}) and width ({}) must be positive",
                    options.num_classes, options.in_channels, options.width));
  Generator& g = gen ? *gen : default_init_generator();
  const int n = (depth - 2) / 6;
  const std::int64_t w = options.width;
  conv1 = register_module("conv1", conv3x3(options.in_channels, w, 1, g));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(w));
  std::int64_t in_planes = w;
  std::shared_ptr<Sequential>* stages[] = {&layer1, &layer2, &layer3};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t planes = w << i;
    auto stage = std::make_shared<Sequential>();
    for (int b = 0; b < n; ++b) {
      stage->add(std::make_shared<BasicBlock>(in_planes, planes, i > 0 && b == 0 ? 2 : 1, &g));
      in_planes = planes;
    }
    *stages[i] = register_module(fmt::format("layer{}", i + 1), stage);
  }
  fc = register_module(
      "fc", std::make_shared<Linear>(4 * w, options.num_classes, true, Init::torch_default, &g));
}

Variable ResNet::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.rank() != 4 || s[1] != options_.in_channels)
    throw InvalidArgument(
        fmt::format("ResNet: expects images [N, {}, H, W], got {}", options_.in_channels, s.str()));
  Variable y = relu((*bn1)((*conv1)(x)));
  y = (*layer3)((*layer2)((*layer1)(y)));
  y = flatten(adaptive_avg_pool2d(y, 1, 1), 1);
  return (*fc)(y);
}

}  // namespace tessera::train
