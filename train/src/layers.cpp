#include "tessera/train/layers.h"

#include <atomic>
#include <cmath>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/init.h"

namespace tessera::train {

std::vector<NamedParameter> Module::named_parameters() {
  std::vector<NamedParameter> out;
  collect_parameters("", out);
  return out;
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (const NamedParameter& p : named_parameters()) n += p.variable->value().numel();
  return n;
}

void Module::to(Device& device) {
  for (const NamedParameter& p : named_parameters()) {
    p.variable->set_value(p.variable->value().to(device));
    p.variable->zero_grad();
  }
}

void Module::collect_parameters(const std::string&, std::vector<NamedParameter>&) {}

namespace {

// Weight and bias for a layer of |shape| ([out, in, ...]) as |init| says.
std::pair<Tensor, Tensor> init_weights(const Shape& shape, Init init, bool with_bias,
                                       Generator& gen) {
  const float fan_in = static_cast<float>(init::fans(shape).first);
  const float relu_gain = std::sqrt(2.0f);
  Tensor w;
  switch (init) {
    case Init::torch_default:
      w = init::kaiming_uniform(shape, gen, std::sqrt(5.0f));
      break;
    case Init::kaiming_uniform:
      w = init::kaiming_uniform(shape, gen);
      break;
    case Init::kaiming_normal:
      w = init::kaiming_normal(shape, gen);
      break;
    case Init::xavier_uniform:
      w = init::xavier_uniform(shape, gen, relu_gain);
      break;
    case Init::xavier_normal:
      w = init::xavier_normal(shape, gen, relu_gain);
      break;
  }
  Tensor b;
  if (with_bias) {
    const Shape bs{shape[0]};
    if (init == Init::torch_default) {
      const float bound = 1.0f / std::sqrt(fan_in);
      b = init::uniform(bs, -bound, bound, gen);
    } else {
      b = Tensor::full(bs, 0.0);
    }
  }
  return {w, b};
}

void add_param(const std::string& prefix, const char* name, Variable& v,
               std::vector<NamedParameter>& out) {
  if (v.defined()) out.push_back({prefix + name, &v});
}

}  // namespace

Linear::Linear(std::int64_t in_features, std::int64_t out_features, Generator& gen, bool with_bias,
               Init init)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0 || out_features <= 0)
    throw InvalidArgument(
        fmt::format("Linear({}, {}): sizes must be positive", in_features, out_features));
  auto [w, b] = init_weights(Shape{out_features, in_features}, init, with_bias, gen);
  weight = Variable(w, true);
  if (b.defined()) bias = Variable(b, true);
}

Variable Linear::forward(const Variable& x) {
  if (x.shape().rank() != 2 || x.shape()[1] != in_)
    throw InvalidArgument(
        fmt::format("{}: expects input [N, {}], got {}", describe(), in_, x.shape().str()));
  return linear(x, weight, bias);
}

std::string Linear::describe() const {
  return fmt::format("Linear(in_features={}, out_features={}, bias={})", in_, out_, bias.defined());
}

void Linear::collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) {
  add_param(prefix, "weight", weight, out);
  add_param(prefix, "bias", bias, out);
}

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
               Generator& gen, int stride, int padding, bool with_bias, Init init)
    : attrs_{stride, stride, padding, padding} {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0 || stride <= 0 || padding < 0)
    throw InvalidArgument(fmt::format(
        "Conv2d({}, {}, kernel_size={}, stride={}, padding={}): sizes and stride must be "
        "positive, padding non-negative",
        in_channels, out_channels, kernel_size, stride, padding));
  auto [w, b] = init_weights(Shape{out_channels, in_channels, kernel_size, kernel_size}, init,
                             with_bias, gen);
  weight = Variable(w, true);
  if (b.defined()) bias = Variable(b, true);
}

Variable Conv2d::forward(const Variable& x) {
  Variable y = conv2d(x, weight, attrs_);
  if (bias.defined()) y = add(y, reshape(bias, Shape{1, bias.shape()[0], 1, 1}));
  return y;
}

std::string Conv2d::describe() const {
  const Shape& w = weight.shape();
  return fmt::format("Conv2d({}, {}, kernel_size={}x{}, stride={}, padding={}, bias={})", w[1],
                     w[0], w[2], w[3], attrs_.stride_h, attrs_.pad_h, bias.defined());
}

void Conv2d::collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) {
  add_param(prefix, "weight", weight, out);
  add_param(prefix, "bias", bias, out);
}

MaxPool2d::MaxPool2d(int kernel_size, int stride) {
  if (kernel_size <= 0 || stride < 0)
    throw InvalidArgument(
        fmt::format("MaxPool2d({}, stride={}): sizes must be positive", kernel_size, stride));
  const int s = stride == 0 ? kernel_size : stride;
  attrs_ = Pool2dAttrs{kernel_size, kernel_size, s, s};
}

std::string MaxPool2d::describe() const {
  return fmt::format("MaxPool2d(kernel_size={}, stride={})", attrs_.kernel_h, attrs_.stride_h);
}

Variable Flatten::forward(const Variable& x) {
  if (x.shape().rank() < 1) throw InvalidArgument("Flatten: expects at least one dimension");
  return reshape(x, Shape{x.shape()[0], -1});
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

Dropout::Dropout(float p, std::int64_t stream)
    : p_(p), stream_(stream >= 0 ? static_cast<std::uint64_t>(stream) : g_next_stream++) {
  if (!(p >= 0 && p < 1))
    throw InvalidArgument(fmt::format("Dropout(p={}): p must be in [0, 1)", p));
}

Variable Dropout::forward(const Variable& x) {
  if (!training_ || p_ == 0) return x;
  const std::uint64_t seed =
      derive_seed(derive_seed(g_dropout_seed, g_dropout_step), stream_ + 0x5eed);
  return dropout(x, p_, seed);
}

std::string Dropout::describe() const {
  return fmt::format("Dropout(p={})", p_);
}

Sequential& Sequential::add(std::unique_ptr<Module> m) {
  if (!m) throw InvalidArgument("Sequential::add: null module");
  m->train(training_);
  children_.push_back(std::move(m));
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (auto& c : children_) y = c->forward(y);
  return y;
}

std::string Sequential::describe() const {
  std::string s = "Sequential(\n";
  for (std::size_t i = 0; i < children_.size(); ++i)
    s += fmt::format("  ({}): {}\n", i, children_[i]->describe());
  return s + ")";
}

void Sequential::train(bool on) {
  training_ = on;
  for (auto& c : children_) c->train(on);
}

void Sequential::collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) {
  for (std::size_t i = 0; i < children_.size(); ++i)
    children_[i]->collect_parameters(fmt::format("{}{}.", prefix, i), out);
}

}  // namespace tessera::train
