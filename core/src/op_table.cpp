// The op table: names, arity, layout flags and shape rules of every op, in OpId order.
#include <fmt/format.h>

#include "rules.h"
#include "tessera/errors.h"
#include "tessera/op.h"

namespace tessera {
namespace {

using namespace rules;

void infer_same(const OpCall& call, std::span<TensorSpec> out) {
  out[0] = {call.in(0).shape(), call.in(0).dtype()};
}

void infer_matmul(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &a = call.in(0), &b = call.in(1);
  require_rank(call, a, 2, "a");
  require_rank(call, b, 2, "b");
  require(a.dtype() == b.dtype(), call, "a and b must have the same dtype, got {} and {}",
          dtype_name(a.dtype()), dtype_name(b.dtype()));
  const auto& at = call.attr<MatmulAttrs>();
  const std::int64_t m = at.trans_a ? a.dim(1) : a.dim(0), ka = at.trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = at.trans_b ? b.dim(1) : b.dim(0), n = at.trans_b ? b.dim(0) : b.dim(1);
  require(ka == kb, call, "inner dimensions differ: {}{} @ {}{} ({} vs {})", a.shape().str(),
          at.trans_a ? "^T" : "", b.shape().str(), at.trans_b ? "^T" : "", ka, kb);
  out[0] = {Shape{m, n}, matmul_out_dtype(call)};
}

void infer_addmm(const OpCall& call, std::span<TensorSpec> out) {
  infer_matmul(call, out);
  const Tensor& bias = call.in(2);
  require_rank(call, bias, 1, "bias");
  require(bias.dtype() == out[0].dtype, call, "bias must have the result's dtype ({}), got {}",
          dtype_name(out[0].dtype), dtype_name(bias.dtype()));
  require(bias.dim(0) == out[0].shape[1], call,
          "bias must have one value per output column ({}), got {}", out[0].shape[1], bias.dim(0));
}

void infer_binary(const OpCall& call, std::span<TensorSpec> out) {
  require(call.in(0).dtype() == call.in(1).dtype(), call,
          "both operands must have the same dtype, got {} and {}", dtype_name(call.in(0).dtype()),
          dtype_name(call.in(1).dtype()));
  out[0] = {broadcast_shapes(call.in(0).shape(), call.in(1).shape()), call.in(0).dtype()};
}

void infer_relu_backward(const OpCall& call, std::span<TensorSpec> out) {
  require_same_shape(call, call.in(0), call.in(1), "grad", "x");
  infer_same(call, out);
}

Shape reduced_shape(const OpCall& call) {
  const auto& at = call.attr<AxisAttrs>();
  const Shape& s = call.in(0).shape();
  require(at.axis >= 0 && at.axis < s.rank(), call, "axis {} is out of range for shape {}", at.axis,
          s.str());
  Shape r;
  for (int i = 0; i < s.rank(); ++i) {
    if (i != at.axis)
      r.push_back(s[i]);
    else if (at.keepdim)
      r.push_back(1);
  }
  return r;
}

void infer_reduce(const OpCall& call, std::span<TensorSpec> out) {
  require(call.in(0).dim(call.attr<AxisAttrs>().axis) > 0 || call.op == OpId::sum, call,
          "can not reduce an empty axis");
  out[0] = {reduced_shape(call), call.in(0).dtype()};
}

void infer_argmax(const OpCall& call, std::span<TensorSpec> out) {
  require(call.in(0).dim(call.attr<AxisAttrs>().axis) > 0, call, "can not reduce an empty axis");
  out[0] = {reduced_shape(call), DType::i32};
}

void infer_softmax(const OpCall& call, std::span<TensorSpec> out) {
  const int axis = call.attr<AxisAttrs>().axis;
  require(axis >= 0 && axis < call.in(0).rank(), call, "axis {} is out of range for shape {}", axis,
          call.in(0).shape().str());
  infer_same(call, out);
}

// The output extent of a convolution along one axis (the effective kernel is dilation * (k-1) + 1).
std::int64_t conv_out(std::int64_t in, std::int64_t k, int stride, int pad, int dilation) {
  return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

void check_conv_attrs(const OpCall& call) {
  const auto& at = call.attr<Conv2dAttrs>();
  require(at.stride_h > 0 && at.stride_w > 0 && at.pad_h >= 0 && at.pad_w >= 0, call,
          "stride must be positive and padding non-negative, got stride {}x{}, padding {}x{}",
          at.stride_h, at.stride_w, at.pad_h, at.pad_w);
  require(at.dilation_h > 0 && at.dilation_w > 0 && at.groups > 0, call,
          "dilation and groups must be positive, got dilation {}x{}, groups {}", at.dilation_h,
          at.dilation_w, at.groups);
}

// The output shape of conv2d for input shape |x| and weight shape |w|.
Shape conv_shape(const OpCall& call, const Shape& x, const Shape& w) {
  check_conv_attrs(call);
  const auto& at = call.attr<Conv2dAttrs>();
  require(x.rank() == 4 && w.rank() == 4, call,
          "input {} and weight {} must be [N,C,H,W] and [O,C/groups,KH,KW]", x.str(), w.str());
  require(x[1] == w[1] * at.groups, call,
          "input {} has {} channels but weight {} with groups {} expects {}", x.str(), x[1],
          w.str(), at.groups, w[1] * at.groups);
  require(w[0] % at.groups == 0, call,
          "weight {} has {} output channels, not a multiple of groups {}", w.str(), w[0],
          at.groups);
  const std::int64_t eh = std::int64_t{at.dilation_h} * (w[2] - 1) + 1;
  const std::int64_t ew = std::int64_t{at.dilation_w} * (w[3] - 1) + 1;
  require(x[2] + 2 * at.pad_h >= eh && x[3] + 2 * at.pad_w >= ew && w[2] > 0 && w[3] > 0, call,
          "kernel {}x{} (dilation {}x{}) is larger than the padded input {}x{}", w[2], w[3],
          at.dilation_h, at.dilation_w, x[2] + 2 * at.pad_h, x[3] + 2 * at.pad_w);
  const std::int64_t ho = conv_out(x[2], w[2], at.stride_h, at.pad_h, at.dilation_h);
  const std::int64_t wo = conv_out(x[3], w[3], at.stride_w, at.pad_w, at.dilation_w);
  return Shape{x[0], w[0], ho, wo};
}

void infer_conv2d(const OpCall& call, std::span<TensorSpec> out) {
  out[0] = {conv_shape(call, call.in(0).shape(), call.in(1).shape()), call.in(0).dtype()};
}

void infer_conv2d_backward_input(const OpCall& call, std::span<TensorSpec> out) {
  require(out[0].shape.rank() == 4, call, "the input shape must be [N,C,H,W], got {}",
          out[0].shape.str());
  require_spec(call, TensorSpec{call.in(0).shape()},
               conv_shape(call, out[0].shape, call.in(1).shape()), "grad");
}

void infer_conv2d_backward_weight(const OpCall& call, std::span<TensorSpec> out) {
  require(out[0].shape.rank() == 4, call, "the weight shape must be [O,C,KH,KW], got {}",
          out[0].shape.str());
  require_spec(call, TensorSpec{call.in(0).shape()},
               conv_shape(call, call.in(1).shape(), out[0].shape), "grad");
}

Shape pool_shape(const OpCall& call, const Shape& x) {
  const auto& at = call.attr<Pool2dAttrs>();
  require(at.kernel_h > 0 && at.kernel_w > 0 && at.stride_h > 0 && at.stride_w > 0, call,
          "kernel and stride must be positive, got kernel {}x{}, stride {}x{}", at.kernel_h,
          at.kernel_w, at.stride_h, at.stride_w);
  require(x.rank() == 4, call, "input must be [N,C,H,W], got {}", x.str());
  require(x[2] >= at.kernel_h && x[3] >= at.kernel_w, call, "kernel {}x{} is larger than input {}",
          at.kernel_h, at.kernel_w, x.str());
  return Shape{x[0], x[1], (x[2] - at.kernel_h) / at.stride_h + 1,
               (x[3] - at.kernel_w) / at.stride_w + 1};
}

void infer_max_pool2d(const OpCall& call, std::span<TensorSpec> out) {
  const Shape s = pool_shape(call, call.in(0).shape());
  out[0] = {s, call.in(0).dtype()};
  out[1] = {s, DType::i32};
}

void infer_max_pool2d_backward(const OpCall& call, std::span<TensorSpec> out) {
  require_same_shape(call, call.in(0), call.in(1), "grad", "indices");
  require_dtype(call, call.in(1), DType::i32, "indices");
  require_spec(call, TensorSpec{call.in(0).shape()}, pool_shape(call, out[0].shape), "grad");
}

void infer_fill(const OpCall&, std::span<TensorSpec>) {}

void infer_max_backward(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<AxisAttrs>();
  const Tensor &grad = call.in(0), &x = call.in(1);
  require(at.axis >= 0 && at.axis < x.rank(), call, "axis {} is out of range for shape {}", at.axis,
          x.shape().str());
  require(x.dim(at.axis) > 0, call, "can not reduce an empty axis");
  require(grad.dtype() == x.dtype(), call, "grad and x must have the same dtype, got {} and {}",
          dtype_name(grad.dtype()), dtype_name(x.dtype()));
  require(grad.numel() * x.dim(at.axis) == x.numel(), call,
          "grad {} is not x {} reduced along axis {}", grad.shape().str(), x.shape().str(),
          at.axis);
  out[0] = {x.shape(), x.dtype()};
}

void infer_dropout_mask(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<DropoutAttrs>();
  require(at.p >= 0 && at.p < 1, call, "p must be in [0, 1), got {}", at.p);
  require(out[0].shape.numel() <= (std::int64_t{1} << 32), call,
          "masks are limited to 2^32 elements, got {}", out[0].shape.str());
}

void infer_dropout(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor& x = call.in(0);
  const auto& at = call.attr<DropoutAttrs>();
  require(at.p >= 0 && at.p < 1, call, "p must be in [0, 1), got {}", at.p);
  require(x.dtype() == DType::f32 || is_16bit_float(x.dtype()), call,
          "x must be f32, f16 or bf16, got {}", dtype_name(x.dtype()));
  require(x.numel() <= (std::int64_t{1} << 32), call,
          "dropout is limited to 2^32 elements (the mask's stream), got {}", x.shape().str());
  out[0] = {x.shape(), x.dtype()};
}

void infer_sgd(const OpCall& call, std::span<TensorSpec> out) {
  require(out[0].shape == call.in(0).shape() && out[1].shape == call.in(0).shape(), call,
          "param {}, grad {} and momentum {} must have the same shape", out[0].shape.str(),
          call.in(0).shape().str(), out[1].shape.str());
}

void infer_adam(const OpCall& call, std::span<TensorSpec> out) {
  const Shape& g = call.in(0).shape();
  require(out[0].shape == g && out[1].shape == g && out[2].shape == g, call,
          "param {}, grad {}, m {} and v {} must have the same shape", out[0].shape.str(), g.str(),
          out[1].shape.str(), out[2].shape.str());
  require(call.attr<AdamAttrs>().step >= 1, call, "step counts from 1, got {}",
          call.attr<AdamAttrs>().step);
}

// Columns: id, name, inputs, outputs, strided_inputs, inplace, differentiable, shape rule.
constexpr OpDef kOps[] = {
    {OpId::matmul, "matmul", 2, 1, false, false, true, infer_matmul},
    {OpId::add, "add", 2, 1, true, false, true, infer_binary},
    {OpId::sub, "sub", 2, 1, true, false, true, infer_binary},
    {OpId::mul, "mul", 2, 1, true, false, true, infer_binary},
    {OpId::div, "div", 2, 1, true, false, true, infer_binary},
    {OpId::add_scalar, "add_scalar", 1, 1, false, false, true, infer_same},
    {OpId::mul_scalar, "mul_scalar", 1, 1, false, false, true, infer_same},
    {OpId::relu, "relu", 1, 1, false, false, true, infer_same},
    {OpId::relu_backward, "relu_backward", 2, 1, false, false, false, infer_relu_backward},
    {OpId::exp, "exp", 1, 1, false, false, true, infer_same},
    {OpId::log, "log", 1, 1, false, false, true, infer_same},
    {OpId::tanh, "tanh", 1, 1, false, false, true, infer_same},
    {OpId::sigmoid, "sigmoid", 1, 1, false, false, true, infer_same},
    {OpId::sum, "sum", 1, 1, false, false, true, infer_reduce},
    {OpId::mean, "mean", 1, 1, false, false, true, infer_reduce},
    {OpId::max, "max", 1, 1, false, false, true, infer_reduce},
    {OpId::argmax, "argmax", 1, 1, false, false, false, infer_argmax},
    {OpId::softmax, "softmax", 1, 1, false, false, true, infer_softmax},
    {OpId::log_softmax, "log_softmax", 1, 1, false, false, true, infer_softmax},
    {OpId::cross_entropy, "cross_entropy", 2, 1, false, false, true, infer_cross_entropy},
    {OpId::cross_entropy_backward, "cross_entropy_backward", 3, 1, false, false, false,
     infer_cross_entropy_backward},
    {OpId::conv2d, "conv2d", 2, 1, false, false, true, infer_conv2d},
    {OpId::conv2d_backward_input, "conv2d_backward_input", 2, 1, false, false, false,
     infer_conv2d_backward_input},
    {OpId::conv2d_backward_weight, "conv2d_backward_weight", 2, 1, false, false, false,
     infer_conv2d_backward_weight},
    {OpId::max_pool2d, "max_pool2d", 1, 2, false, false, true, infer_max_pool2d},
    {OpId::max_pool2d_backward, "max_pool2d_backward", 2, 1, false, false, false,
     infer_max_pool2d_backward},
    {OpId::copy, "copy", 1, 1, true, false, true, infer_same},
    {OpId::fill, "fill", 0, 1, false, true, false, infer_fill},
    {OpId::sgd_update, "sgd_update", 1, 2, false, true, false, infer_sgd},
    {OpId::adam_update, "adam_update", 1, 3, false, true, false, infer_adam},
    {OpId::max_backward, "max_backward", 2, 1, false, false, false, infer_max_backward},
    {OpId::dropout_mask, "dropout_mask", 0, 1, false, true, false, infer_dropout_mask},
    {OpId::dropout, "dropout", 1, 1, false, false, true, infer_dropout},
    {OpId::addmm, "addmm", 3, 1, false, false, true, infer_addmm},

    // --- tensor API: casts, factories, indexing ---
    {OpId::cast, "cast", 1, 1, true, false, false, infer_cast},
    {OpId::copy_into, "copy_into", 1, 1, true, true, false, infer_copy_into, true},
    {OpId::arange, "arange", 0, 1, false, true, false, infer_arange},
    {OpId::rand, "rand", 0, 1, false, true, false, infer_random},
    {OpId::randn, "randn", 0, 1, false, true, false, infer_random},
    {OpId::randint, "randint", 0, 1, false, true, false, infer_random},
    {OpId::index_select, "index_select", 2, 1, false, false, true, infer_index_select},
    {OpId::index_select_backward, "index_select_backward", 2, 1, false, false, false,
     infer_index_select_backward},

    // --- element-wise math, comparisons, selection ---
    {OpId::neg, "neg", 1, 1, false, false, true, infer_numeric_unary},
    {OpId::abs, "abs", 1, 1, false, false, true, infer_numeric_unary},
    {OpId::sign, "sign", 1, 1, false, false, false, infer_numeric_unary},
    {OpId::sqrt, "sqrt", 1, 1, false, false, true, infer_float_unary},
    {OpId::rsqrt, "rsqrt", 1, 1, false, false, true, infer_float_unary},
    {OpId::pow, "pow", 1, 1, false, false, true, infer_float_unary},
    {OpId::clamp, "clamp", 1, 1, false, false, true, infer_numeric_unary},
    {OpId::gelu, "gelu", 1, 1, false, false, true, infer_gelu},
    {OpId::gelu_backward, "gelu_backward", 2, 1, false, false, false, infer_gelu_backward},
    {OpId::silu, "silu", 1, 1, false, false, true, infer_float_unary},
    {OpId::silu_backward, "silu_backward", 2, 1, false, false, false, infer_pointwise_backward},
    {OpId::erf, "erf", 1, 1, false, false, true, infer_float_unary},
    {OpId::minimum, "minimum", 2, 1, true, false, true, infer_min_max},
    {OpId::maximum, "maximum", 2, 1, true, false, true, infer_min_max},
    {OpId::eq, "eq", 2, 1, true, false, false, infer_compare},
    {OpId::ne, "ne", 2, 1, true, false, false, infer_compare},
    {OpId::lt, "lt", 2, 1, true, false, false, infer_compare},
    {OpId::le, "le", 2, 1, true, false, false, infer_compare},
    {OpId::gt, "gt", 2, 1, true, false, false, infer_compare},
    {OpId::ge, "ge", 2, 1, true, false, false, infer_compare},
    {OpId::where, "where", 3, 1, true, false, true, infer_where},
    {OpId::masked_fill, "masked_fill", 2, 1, true, false, true, infer_masked_fill},

    // --- reductions, normalisation, losses, optimizers ---
    {OpId::min, "min", 1, 1, false, false, true, infer_min},
    {OpId::min_backward, "min_backward", 2, 1, false, false, false, infer_min_backward},
    {OpId::var, "var", 1, 1, false, false, true, infer_var},
    {OpId::std, "std", 1, 1, false, false, true, infer_var},
    {OpId::prod, "prod", 1, 1, false, false, true, infer_prod},
    {OpId::prod_backward, "prod_backward", 2, 1, false, false, false, infer_prod_backward},
    {OpId::softmax_backward, "softmax_backward", 2, 1, false, false, false, infer_softmax_backward},
    {OpId::log_softmax_backward, "log_softmax_backward", 2, 1, false, false, false,
     infer_softmax_backward},
    {OpId::layer_norm, "layer_norm", 3, 3, false, false, true, infer_layer_norm},
    {OpId::layer_norm_backward, "layer_norm_backward", 5, 3, false, false, false,
     infer_layer_norm_backward},
    {OpId::batch_norm, "batch_norm", 3, 5, false, true, true, infer_batch_norm},
    {OpId::batch_norm_backward, "batch_norm_backward", 5, 3, false, false, false,
     infer_batch_norm_backward},
    {OpId::mse_loss, "mse_loss", 2, 1, false, false, true, infer_mse_loss},
    {OpId::sum_squares, "sum_squares", 1, 1, false, false, false, infer_sum_squares},
    {OpId::adamw_update, "adamw_update", 1, 3, false, true, false, infer_adamw},

    // --- nn: batched matmul, embedding, pooling, attention ---
    {OpId::bmm, "bmm", 2, 1, false, false, true, infer_bmm},
    {OpId::embedding, "embedding", 2, 1, false, false, true, infer_embedding},
    {OpId::embedding_backward, "embedding_backward", 2, 1, false, false, false,
     infer_embedding_backward},
    {OpId::avg_pool2d, "avg_pool2d", 1, 1, false, false, true, infer_avg_pool2d},
    {OpId::avg_pool2d_backward, "avg_pool2d_backward", 1, 1, false, false, false,
     infer_avg_pool2d_backward},
    {OpId::adaptive_avg_pool2d, "adaptive_avg_pool2d", 1, 1, false, false, true,
     infer_adaptive_avg_pool2d},
    {OpId::adaptive_avg_pool2d_backward, "adaptive_avg_pool2d_backward", 1, 1, false, false, false,
     infer_adaptive_avg_pool2d_backward},

    // attention
    {OpId::scaled_dot_product_attention, "scaled_dot_product_attention", 3, 2, false, false, true,
     infer_attention},
    {OpId::scaled_dot_product_attention_backward, "scaled_dot_product_attention_backward", 6, 3,
     false, false, false, infer_attention_backward},

};
static_assert(std::size(kOps) == kNumOps, "one OpDef per OpId");
constexpr bool in_id_order() {
  for (std::size_t i = 0; i < std::size(kOps); ++i)
    if (static_cast<std::size_t>(kOps[i].id) != i) return false;
  return true;
}
static_assert(in_id_order(), "kOps lists the ops in OpId order");

}  // namespace

const OpDef& op_def(OpId op) {
  return kOps[static_cast<int>(op)];
}

OpCall make_call(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs) {
  if (inputs.size() > static_cast<std::size_t>(kMaxOpInputs))
    throw InvalidArgument(fmt::format("{}: {} inputs, more than a call holds ({})", op_name(op),
                                      inputs.size(), kMaxOpInputs));
  OpCall call;
  call.op = op;
  call.num_inputs = static_cast<int>(inputs.size());
  call.num_outputs = op_def(op).num_outputs;
  int i = 0;
  for (const Tensor& t : inputs) call.inputs[static_cast<std::size_t>(i++)] = t;
  call.attrs = std::move(attrs);
  return call;
}

std::span<const OpDef> op_defs() {
  return kOps;
}

bool op_from_name(std::string_view name, OpId& out) {
  for (const OpDef& d : kOps)
    if (d.name == name) {
      out = d.id;
      return true;
    }
  return false;
}

bool op_computes_in_f32(OpId op) {
  switch (op) {
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::add_scalar:
    case OpId::mul_scalar:
    case OpId::relu:
    case OpId::relu_backward:
    case OpId::exp:
    case OpId::log:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::sum:
    case OpId::mean:
    case OpId::max:
    case OpId::max_backward:
    case OpId::argmax:
    case OpId::min:
    case OpId::min_backward:
    case OpId::var:
    case OpId::std:
    case OpId::prod:
    case OpId::prod_backward:
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::softmax_backward:
    case OpId::log_softmax_backward:
    case OpId::neg:
    case OpId::abs:
    case OpId::sign:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::pow:
    case OpId::clamp:
    case OpId::gelu:
    case OpId::gelu_backward:
    case OpId::silu:
    case OpId::silu_backward:
    case OpId::erf:
    case OpId::minimum:
    case OpId::maximum:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::where:
    case OpId::masked_fill:
    case OpId::dropout:
    case OpId::scaled_dot_product_attention:
    case OpId::scaled_dot_product_attention_backward:
      return true;
    default:
      return false;
  }
}

std::string OpCall::describe() const {
  const Tensor& t = num_inputs > 0 ? in(0) : out(0);
  if (!t.defined()) return "no tensors";
  return fmt::format("{}, {}", dtype_name(t.dtype()), t.shape().str());
}

}  // namespace tessera
