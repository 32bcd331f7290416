// Shape rules of the reductions, normalisation, losses and optimizer group (rules.h).
#include "rules.h"

namespace tessera::rules {
namespace {

// |s| without dimension |axis| (or with it set to 1 under keepdim), after checking the axis.
Shape reduced(const OpCall& call, const Shape& s, int axis, bool keepdim) {
  require(axis >= 0 && axis < s.rank(), call, "axis {} is out of range for shape {}", axis,
          s.str());
  Shape r;
  for (int i = 0; i < s.rank(); ++i) {
    if (i != axis)
      r.push_back(s[i]);
    else if (keepdim)
      r.push_back(1);
  }
  return r;
}

void require_f32(const OpCall& call, const Tensor& t, const char* what) {
  require_dtype(call, t, DType::f32, what);
}

// f32, f16 or bf16 (the 16-bit ones computed in f32: op_computes_in_f32).
void require_float(const OpCall& call, const Tensor& t, const char* what) {
  const DType d = t.dtype();
  require(d == DType::f32 || is_16bit_float(d), call, "{} must be f32, f16 or bf16, got {}", what,
          dtype_name(d));
}

// (grad [reduced], x) of a reduction's backward: grad is x reduced along the axis, keepdim or not.
void check_reduce_backward(const OpCall& call, std::span<TensorSpec> out, bool nonempty) {
  const auto& at = call.attr<AxisAttrs>();
  const Tensor &grad = call.in(0), &x = call.in(1);
  const Shape dropped = reduced(call, x.shape(), at.axis, false);
  require(!nonempty || x.dim(at.axis) > 0, call, "can not reduce an empty axis");
  require(grad.dtype() == x.dtype(), call, "grad and x must have the same dtype, got {} and {}",
          dtype_name(grad.dtype()), dtype_name(x.dtype()));
  require(grad.shape() == dropped || grad.shape() == reduced(call, x.shape(), at.axis, true), call,
          "grad {} is not x {} reduced along axis {}", grad.shape().str(), x.shape().str(),
          at.axis);
  out[0] = {x.shape(), x.dtype()};
}

// The trailing dimensions axis.. of |s| (torch's normalized_shape), and |s| with them set to 1.
Shape trailing(const Shape& s, int axis) {
  Shape r;
  for (int i = axis; i < s.rank(); ++i) r.push_back(s[i]);
  return r;
}
Shape row_stats_shape(const Shape& s, int axis) {
  Shape r = s;
  for (int i = axis; i < s.rank(); ++i) r[i] = 1;
  return r;
}

void check_layer_norm(const OpCall& call, const Tensor& x, const Tensor& weight) {
  const auto& at = call.attr<LayerNormAttrs>();
  require_f32(call, x, "x");
  require(at.axis >= 0 && at.axis < x.rank(), call,
          "the normalised dimensions start at axis {}, out of range for x {}", at.axis,
          x.shape().str());
  require(at.eps >= 0, call, "eps must not be negative, got {}", at.eps);
  const Shape norm = trailing(x.shape(), at.axis);
  require(norm.numel() > 0, call, "the normalised shape {} of x {} must not be empty", norm.str(),
          x.shape().str());
  require(weight.shape() == norm, call, "weight {} must have the normalised shape {} of x {}",
          weight.shape().str(), norm.str(), x.shape().str());
  require_f32(call, weight, "weight");
}

// The channel count of [N, C, ...] and a check that |t| is a [C] f32 vector.
void require_channels(const OpCall& call, const Shape& t, std::int64_t c, const char* what) {
  require(t == Shape{c}, call, "{} must have shape [{}] (one value per channel), got {}", what, c,
          t.str());
}

std::int64_t check_batch_norm_x(const OpCall& call, const Tensor& x) {
  require_f32(call, x, "x");
  require(x.rank() >= 2, call, "x must be [N, C, ...], got {}", x.shape().str());
  const auto& at = call.attr<BatchNormAttrs>();
  require(at.eps >= 0, call, "eps must not be negative, got {}", at.eps);
  return x.dim(1);
}

void check_logits_labels(const OpCall& call) {
  const Tensor &logits = call.in(0), &labels = call.in(1);
  require_f32(call, logits, "logits");
  require(logits.rank() == 2 || logits.rank() == 3, call,
          "logits must be [N, C] or [N, T, C] (classes last), got {}", logits.shape().str());
  require(labels.dtype() == DType::i32 || labels.dtype() == DType::i64, call,
          "labels must be i32 or i64, got {}", dtype_name(labels.dtype()));
  Shape want;
  for (int i = 0; i + 1 < logits.rank(); ++i) want.push_back(logits.dim(i));
  require(labels.shape() == want, call,
          "labels {} must have one entry per row of logits {} (shape {})", labels.shape().str(),
          logits.shape().str(), want.str());
  require(logits.dim(-1) > 0, call, "logits {} must have at least one class", logits.shape().str());
  const float ls = call.attr<CrossEntropyAttrs>().label_smoothing;
  require(ls >= 0 && ls <= 1, call, "label_smoothing must be in [0, 1], got {}", ls);
}

}  // namespace

void infer_min(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<AxisAttrs>();
  require_float(call, call.in(0), "x");
  const Shape r = reduced(call, call.in(0).shape(), at.axis, at.keepdim);
  require(call.in(0).dim(at.axis) > 0, call, "can not reduce an empty axis");
  out[0] = {r, call.in(0).dtype()};
}

void infer_min_backward(const OpCall& call, std::span<TensorSpec> out) {
  check_reduce_backward(call, out, true);
}

void infer_var(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<VarAttrs>();
  require_float(call, call.in(0), "x");
  out[0] = {reduced(call, call.in(0).shape(), at.axis, at.keepdim), call.in(0).dtype()};
}

void infer_prod(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<AxisAttrs>();
  require_float(call, call.in(0), "x");
  out[0] = {reduced(call, call.in(0).shape(), at.axis, at.keepdim), call.in(0).dtype()};
}

void infer_prod_backward(const OpCall& call, std::span<TensorSpec> out) {
  check_reduce_backward(call, out, false);
}

void infer_softmax_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &y = call.in(1);
  require_same_shape(call, grad, y, "grad", "y");
  require_float(call, y, "y");
  require(grad.dtype() == y.dtype(), call, "grad and y must have the same dtype, got {} and {}",
          dtype_name(grad.dtype()), dtype_name(y.dtype()));
  const int axis = call.attr<AxisAttrs>().axis;
  require(axis >= 0 && axis < y.rank(), call, "axis {} is out of range for shape {}", axis,
          y.shape().str());
  out[0] = {y.shape(), y.dtype()};
}

void infer_layer_norm(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor& x = call.in(0);
  check_layer_norm(call, x, call.in(1));
  require(call.in(2).shape() == call.in(1).shape(), call,
          "bias {} must have the shape of weight {}", call.in(2).shape().str(),
          call.in(1).shape().str());
  require_f32(call, call.in(2), "bias");
  const Shape stats = row_stats_shape(x.shape(), call.attr<LayerNormAttrs>().axis);
  out[0] = {x.shape(), DType::f32};
  out[1] = {stats, DType::f32};
  out[2] = {stats, DType::f32};
}

void infer_layer_norm_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &x = call.in(1), &w = call.in(2);
  check_layer_norm(call, x, w);
  require_same_shape(call, grad, x, "grad", "x");
  require_f32(call, grad, "grad");
  const Shape stats = row_stats_shape(x.shape(), call.attr<LayerNormAttrs>().axis);
  for (int i : {3, 4}) {
    require(call.in(i).shape() == stats, call, "{} {} must have shape {} for x {}",
            i == 3 ? "mean" : "rstd", call.in(i).shape().str(), stats.str(), x.shape().str());
    require_f32(call, call.in(i), i == 3 ? "mean" : "rstd");
  }
  out[0] = {x.shape(), DType::f32};
  out[1] = {w.shape(), DType::f32};
  out[2] = {w.shape(), DType::f32};
}

void infer_batch_norm(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor& x = call.in(0);
  const std::int64_t c = check_batch_norm_x(call, x);
  require_channels(call, call.in(1).shape(), c, "weight");
  require_channels(call, call.in(2).shape(), c, "bias");
  require_f32(call, call.in(1), "weight");
  require_f32(call, call.in(2), "bias");
  require_spec(call, out[0], x.shape(), "y");
  require_channels(call, out[1].shape, c, "save_mean");
  require_channels(call, out[2].shape, c, "save_invstd");
  require_channels(call, out[3].shape, c, "running_mean");
  require_channels(call, out[4].shape, c, "running_var");
  if (call.attr<BatchNormAttrs>().training)
    require(x.numel() / std::max<std::int64_t>(c, 1) > 1 || x.numel() == 0, call,
            "expected more than 1 value per channel when training, got x {}", x.shape().str());
}

void infer_batch_norm_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &x = call.in(1);
  const std::int64_t c = check_batch_norm_x(call, x);
  require_same_shape(call, grad, x, "grad", "x");
  require_f32(call, grad, "grad");
  const char* names[] = {"weight", "save_mean", "save_invstd"};
  for (int i = 2; i < 5; ++i) {
    require_channels(call, call.in(i).shape(), c, names[i - 2]);
    require_f32(call, call.in(i), names[i - 2]);
  }
  out[0] = {x.shape(), DType::f32};
  out[1] = {Shape{c}, DType::f32};
  out[2] = {Shape{c}, DType::f32};
}

void infer_mse_loss(const OpCall& call, std::span<TensorSpec> out) {
  require_same_shape(call, call.in(0), call.in(1), "input", "target");
  require_f32(call, call.in(0), "input");
  require_f32(call, call.in(1), "target");
  const Reduction r = call.attr<LossAttrs>().reduction;
  require(r == Reduction::none || r == Reduction::mean || r == Reduction::sum, call,
          "reduction must be none, mean or sum, got {}", static_cast<int>(r));
  out[0] = {r == Reduction::none ? call.in(0).shape() : Shape{}, DType::f32};
}

void infer_sum_squares(const OpCall& call, std::span<TensorSpec> out) {
  require_f32(call, call.in(0), "x");
  out[0] = {Shape{}, DType::f32};
}

void infer_adamw(const OpCall& call, std::span<TensorSpec> out) {
  const Shape& g = call.in(0).shape();
  require(out[0].shape == g && out[1].shape == g && out[2].shape == g, call,
          "param {}, grad {}, m {} and v {} must have the same shape", out[0].shape.str(), g.str(),
          out[1].shape.str(), out[2].shape.str());
  require(call.attr<AdamAttrs>().step >= 1, call, "step counts from 1, got {}",
          call.attr<AdamAttrs>().step);
}

void infer_cross_entropy(const OpCall& call, std::span<TensorSpec> out) {
  check_logits_labels(call);
  out[0] = {Shape{}, DType::f32};
}

void infer_cross_entropy_backward(const OpCall& call, std::span<TensorSpec> out) {
  check_logits_labels(call);
  require(call.in(2).numel() == 1, call, "grad must have one element, got {}",
          call.in(2).shape().str());
  require_f32(call, call.in(2), "grad");
  out[0] = {call.in(0).shape(), DType::f32};
}

}  // namespace tessera::rules
