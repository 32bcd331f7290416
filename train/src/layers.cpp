// Linear, Conv2d, BatchNorm2d, LayerNorm and Embedding (layers_basic.cpp has the parameterless
// layers, layers_attention.cpp the attention modules).
#include "tessera/train/layers.h"

#include <cmath>

#include <fmt/format.h>

#include "sync_batch_norm.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/init.h"

namespace tessera::train {

namespace {

Generator& pick(Generator* gen) {
  return gen ? *gen : default_init_generator();
}

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

const char* py_bool(bool b) {
  return b ? "True" : "False";
}

}  // namespace

// --- Linear ---

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias, Init init,
               Generator* gen)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0 || out_features <= 0)
    throw InvalidArgument(
        fmt::format("Linear({}, {}): sizes must be positive", in_features, out_features));
  auto [w, b] = init_weights(Shape{out_features, in_features}, init, with_bias, pick(gen));
  weight = register_parameter("weight", w);
  bias = register_parameter("bias", b);
}

Variable Linear::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.rank() < 1 || s[s.rank() - 1] != in_)
    throw InvalidArgument(
        fmt::format("{}: expects input [..., {}], got {}", describe(), in_, s.str()));
  if (s.rank() == 2) return linear(x, weight, bias);
  Shape out = s;
  out[s.rank() - 1] = out_;
  return reshape(linear(reshape(x, Shape{-1, in_}), weight, bias), out);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_, out_,
                     py_bool(bias.defined()));
}

// --- Conv2d ---

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
               int stride, int padding, int dilation, int groups, bool with_bias, Init init,
               Generator* gen)
    : in_(in_channels), out_(out_channels), k_(kernel_size), attrs_{stride,  stride,   padding,
                                                                    padding, dilation, dilation,
                                                                    groups} {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0 || stride <= 0 || padding < 0 ||
      dilation <= 0 || groups <= 0 || in_channels % groups != 0 || out_channels % groups != 0)
    throw InvalidArgument(fmt::format(
        "Conv2d({}, {}, kernel_size={}, stride={}, padding={}, dilation={}, groups={}): sizes, "
        "stride, dilation and groups must be positive, padding non-negative, and groups must "
        "divide both channel counts",
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups));
  auto [w, b] = init_weights(Shape{out_channels, in_channels / groups, kernel_size, kernel_size},
                             init, with_bias, pick(gen));
  weight = register_parameter("weight", w);
  bias = register_parameter("bias", b);
}

Variable Conv2d::forward(const Variable& x) {
  Variable y = conv2d(x, weight, attrs_);
  if (bias.defined()) y = add(y, reshape(bias, Shape{1, out_, 1, 1}));
  return y;
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({}, {}), stride=({}, {})", in_, out_, k_, k_,
                              attrs_.stride_h, attrs_.stride_w);
  if (attrs_.pad_h != 0) s += fmt::format(", padding=({}, {})", attrs_.pad_h, attrs_.pad_w);
  if (attrs_.dilation_h != 1)
    s += fmt::format(", dilation=({}, {})", attrs_.dilation_h, attrs_.dilation_w);
  if (attrs_.groups != 1) s += fmt::format(", groups={}", attrs_.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// --- BatchNorm2d ---

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, double momentum, bool affine,
                         bool track_running_stats)
    : c_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine),
      track_(track_running_stats) {
  if (num_features <= 0 || !(eps > 0) || !(momentum >= 0 && momentum <= 1))
    throw InvalidArgument(fmt::format(
        "BatchNorm2d({}, eps={}, momentum={}): num_features and eps must be positive, momentum "
        "in [0, 1]",
        num_features, eps, momentum));
  const Shape s{num_features};
  weight = register_parameter("weight", affine ? Tensor::full(s, 1.0) : Tensor());
  bias = register_parameter("bias", affine ? Tensor::full(s, 0.0) : Tensor());
  running_mean_ = &register_buffer("running_mean", track_ ? Tensor::full(s, 0.0) : Tensor());
  running_var_ = &register_buffer("running_var", track_ ? Tensor::full(s, 1.0) : Tensor());
  num_batches_tracked_ = &register_buffer(
      "num_batches_tracked", track_ ? Tensor::full(Shape{}, 0.0, DType::i64) : Tensor());
}

namespace {
// |count| + 1 as a new i64 scalar on its device. The kernels add f32 only, so the value goes
// through the host: read once when it is not the tensor written last (after to() or a load),
// then counted here, so a training step never waits for the device.
Tensor incremented(const Tensor& count, Tensor& last_written, std::int64_t& host_count) {
  if (!last_written.defined() || !count.shares_storage(last_written))
    host_count = count.to_vector<std::int64_t>().at(0);
  ++host_count;
  last_written =
      Tensor::from_bytes(&host_count, sizeof host_count, Shape{}, DType::i64, &count.device());
  return last_written;
}
}  // namespace

Variable BatchNorm2d::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.rank() != 4 || s[1] != c_)
    throw InvalidArgument(
        fmt::format("{}: expects input [N, {}, H, W], got {}", describe(), c_, s.str()));
  if (training_ && track_)
    *num_batches_tracked_ = incremented(*num_batches_tracked_, last_count_, host_count_);
  if (training_ && group_ && group_->size() > 1)
    return detail::sync_batch_norm(x, weight, bias, *running_mean_, *running_var_, momentum_, eps_,
                                   *group_);
  return batch_norm(x, weight, bias, *running_mean_, *running_var_, training_ || !track_, momentum_,
                    eps_);
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", c_, eps_,
                     momentum_, py_bool(affine_), py_bool(track_));
}

// --- LayerNorm ---

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : shape_(std::move(normalized_shape)), eps_(eps), affine_(elementwise_affine) {
  bool ok = shape_.rank() > 0 && eps > 0;
  for (int i = 0; i < shape_.rank(); ++i) ok = ok && shape_[i] > 0;
  if (!ok)
    throw InvalidArgument(fmt::format(
        "LayerNorm({}, eps={}): normalized_shape must be non-empty and positive, eps positive",
        shape_.str(), eps));
  weight = register_parameter("weight", affine_ ? Tensor::full(shape_, 1.0) : Tensor());
  bias = register_parameter("bias", affine_ && with_bias ? Tensor::full(shape_, 0.0) : Tensor());
}

Variable LayerNorm::forward(const Variable& x) {
  return layer_norm(x, shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (int i = 0; i < shape_.rank(); ++i) dims += fmt::format("{}{}", i ? ", " : "", shape_[i]);
  if (shape_.rank() == 1) dims += ",";
  return fmt::format("({}), eps={}, elementwise_affine={}", dims, eps_, py_bool(affine_));
}

// --- Embedding ---

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                     std::optional<std::int64_t> padding_idx, Generator* gen)
    : num_(num_embeddings), dim_(embedding_dim) {
  if (num_embeddings <= 0 || embedding_dim <= 0)
    throw InvalidArgument(
        fmt::format("Embedding({}, {}): sizes must be positive", num_embeddings, embedding_dim));
  if (padding_idx) {
    if (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings)
      throw InvalidArgument(fmt::format(
          "Embedding({}, {}, padding_idx={}): padding_idx must be in [{}, {})", num_embeddings,
          embedding_dim, *padding_idx, -num_embeddings, num_embeddings));
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  Tensor w = init::normal(Shape{num_, dim_}, 0.0f, 1.0f, pick(gen));
  if (padding_idx_) {
    Tensor row = w.select(0, *padding_idx_);
    fill_(row, 0.0);
  }
  weight = register_parameter("weight", w);
}

Variable Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, padding_idx_);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_, dim_);
  if (padding_idx_) s += fmt::format(", padding_idx={}", *padding_idx_);
  return s;
}

}  // namespace tessera::train
