// The layers without parameters: activations, pooling, Flatten and Dropout.
#include <atomic>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train/layers.h"

namespace tessera::train {

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw InvalidArgument(
        fmt::format("GELU(approximate='{}'): approximate must be 'none' or 'tanh'", approximate_));
}

std::string GELU::extra_repr() const {
  return fmt::format("approximate='{}'", approximate_);
}

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_, end_);
}

MaxPool2d::MaxPool2d(int kernel_size, int stride) {
  if (kernel_size <= 0 || stride < 0)
    throw InvalidArgument(
        fmt::format("MaxPool2d({}, stride={}): kernel_size must be positive, stride non-negative",
                    kernel_size, stride));
  const int s = stride == 0 ? kernel_size : stride;
  attrs_ = Pool2dAttrs{kernel_size, kernel_size, s, s};
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding=0, dilation=1, ceil_mode=False",
                     attrs_.kernel_h, attrs_.stride_h);
}

AvgPool2d::AvgPool2d(int kernel_size, int stride, int padding, bool ceil_mode,
                     bool count_include_pad) {
  if (kernel_size <= 0 || stride < 0 || padding < 0 || 2 * padding > kernel_size || ceil_mode)
    throw InvalidArgument(fmt::format(
        "AvgPool2d({}, stride={}, padding={}, ceil_mode={}): kernel_size must be positive, "
        "stride non-negative, padding in [0, kernel_size / 2], ceil_mode false (not supported)",
        kernel_size, stride, padding, ceil_mode));
  const int s = stride == 0 ? kernel_size : stride;
  attrs_ = AvgPool2dAttrs{kernel_size, kernel_size, s, s, padding, padding, count_include_pad};
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", attrs_.kernel_h, attrs_.stride_h,
                     attrs_.pad_h);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w)
    : h_(out_h), w_(out_w < 0 ? out_h : out_w) {
  if (h_ <= 0 || w_ <= 0)
    throw InvalidArgument(
        fmt::format("AdaptiveAvgPool2d(({}, {})): output sizes must be positive", out_h, out_w));
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size=({}, {})", h_, w_);
}

namespace {
std::atomic<std::uint64_t> g_next_stream{0};
thread_local std::uint64_t g_dropout_seed = 0;
thread_local std::uint64_t g_dropout_step = 0;
}  // namespace

void set_dropout_step(std::uint64_t seed, std::uint64_t step) {
  g_dropout_seed = seed;
  g_dropout_step = step;
}

std::uint64_t next_dropout_stream() {
  return g_next_stream++;
}

std::uint64_t dropout_seed(std::uint64_t stream) {
  return derive_seed(derive_seed(g_dropout_seed, g_dropout_step), stream + 0x5eed);
}

Dropout::Dropout(float p, std::int64_t stream)
    : p_(p), stream_(stream >= 0 ? static_cast<std::uint64_t>(stream) : next_dropout_stream()) {
  if (!(p >= 0 && p < 1))
    throw InvalidArgument(fmt::format("Dropout(p={}): p must be in [0, 1)", p));
}

Variable Dropout::forward(const Variable& x) {
  if (!training_ || p_ == 0) return x;
  return dropout(x, p_, dropout_seed(stream_));
}

std::string Dropout::extra_repr() const {
  return fmt::format("p={}, inplace=False", p_);
}

}  // namespace tessera::train
