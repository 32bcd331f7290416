// The front-end of the reductions, normalisation, losses and optimizer group (ops.h).
#include <array>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

Tensor run1(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs) {
  OpCall call = make_call(op, inputs, attrs);
  run_op(call);
  return call.outputs[0];
}

const Tensor& defined(const Tensor& x, OpId op) {
  if (!x.defined()) throw InvalidArgument(fmt::format("{}: x is undefined", op_name(op)));
  return x;
}

AxisAttrs axis_attrs(const Tensor& x, OpId op, int axis, bool keepdim) {
  return AxisAttrs{defined(x, op).shape().normalize_axis(axis), keepdim};
}

// sum or mean over the axes |dims| of |x| as one call of |op| along one axis: a view
// [outer, n, inner] when the reduced axes are one block of a contiguous tensor, else a copy with
// the kept axes first and the reduced ones last, [kept, n].
Tensor reduce_axes(OpId op, const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  defined(x, op);
  const int rank = x.rank();
  std::array<bool, kMaxDims> red{};
  for (int d : dims) {
    const int a = x.shape().normalize_axis(d);
    if (red[static_cast<std::size_t>(a)])
      throw InvalidArgument(fmt::format("{}: axis {} appears more than once in the axes of x {}",
                                        op_name(op), d, x.shape().str()));
    red[static_cast<std::size_t>(a)] = true;
  }
  if (dims.empty())
    for (int i = 0; i < rank; ++i) red[static_cast<std::size_t>(i)] = true;
  Shape out;
  int lo = rank, hi = -1;
  std::int64_t n = 1, kept = 1;
  for (int i = 0; i < rank; ++i) {
    if (red[static_cast<std::size_t>(i)]) {
      if (keepdim) out.push_back(1);
      lo = std::min(lo, i);
      hi = i;
      n *= x.dim(i);
    } else {
      out.push_back(x.dim(i));
      kept *= x.dim(i);
    }
  }
  if (hi < 0) return copy(x);  // nothing to reduce (a rank-0 tensor)
  bool block = x.is_contiguous();
  for (int i = lo; i <= hi && block; ++i) block = red[static_cast<std::size_t>(i)] || x.dim(i) == 1;
  Tensor src;
  if (block) {
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < lo; ++i) outer *= x.dim(i);
    for (int i = hi + 1; i < rank; ++i) inner *= x.dim(i);
    src = x.reshape({outer, n, inner});
  } else {
    // Transposes that bring the kept axes to the front in order (a permuted view), then one copy.
    std::array<int, kMaxDims> want{}, cur{};
    int k = 0;
    for (int i = 0; i < rank; ++i)
      if (!red[static_cast<std::size_t>(i)]) want[static_cast<std::size_t>(k++)] = i;
    for (int i = 0; i < rank; ++i)
      if (red[static_cast<std::size_t>(i)]) want[static_cast<std::size_t>(k++)] = i;
    for (int i = 0; i < rank; ++i) cur[static_cast<std::size_t>(i)] = i;
    Tensor v = x;
    for (int i = 0; i < rank; ++i) {
      int j = i;
      while (cur[static_cast<std::size_t>(j)] != want[static_cast<std::size_t>(i)]) ++j;
      if (j != i) {
        v = v.transpose(i, j);
        std::swap(cur[static_cast<std::size_t>(i)], cur[static_cast<std::size_t>(j)]);
      }
    }
    src = v.reshape({kept, n, 1});
  }
  return run1(op, {src}, AxisAttrs{1, false}).reshape(out);
}

Tensor ones_like_shape(const Shape& s, const Tensor& like, double value) {
  return Tensor::full(s, value, DType::f32, &like.device());
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce_axes(OpId::sum, x, dims, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return reduce_axes(OpId::mean, x, dims, keepdim);
}
Tensor min(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::min, {x}, axis_attrs(x, OpId::min, axis, keepdim));
}
Tensor min_backward(const Tensor& grad, const Tensor& x, int axis) {
  return run1(OpId::min_backward, {grad, x}, axis_attrs(x, OpId::min_backward, axis, false));
}
Tensor var(const Tensor& x, int axis, double correction, bool keepdim) {
  const int a = defined(x, OpId::var).shape().normalize_axis(axis);
  return run1(OpId::var, {x}, VarAttrs{a, keepdim, correction});
}
Tensor std(const Tensor& x, int axis, double correction, bool keepdim) {
  const int a = defined(x, OpId::std).shape().normalize_axis(axis);
  return run1(OpId::std, {x}, VarAttrs{a, keepdim, correction});
}
Tensor prod(const Tensor& x, int axis, bool keepdim) {
  return run1(OpId::prod, {x}, axis_attrs(x, OpId::prod, axis, keepdim));
}
Tensor prod_backward(const Tensor& grad, const Tensor& x, int axis) {
  return run1(OpId::prod_backward, {grad, x}, axis_attrs(x, OpId::prod_backward, axis, false));
}
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int axis) {
  return run1(OpId::softmax_backward, {grad, y},
              axis_attrs(y, OpId::softmax_backward, axis, false));
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int axis) {
  return run1(OpId::log_softmax_backward, {grad, y},
              axis_attrs(y, OpId::log_softmax_backward, axis, false));
}

namespace {
int layer_norm_axis(const Tensor& x, const Shape& normalized_shape, OpId op) {
  defined(x, op);
  const int k = normalized_shape.rank(), axis = x.rank() - k;
  bool ok = k >= 1 && axis >= 0;
  for (int i = 0; ok && i < k; ++i) ok = x.dim(axis + i) == normalized_shape[i];
  if (!ok)
    throw InvalidArgument(
        fmt::format("{}: normalized_shape {} must be the last dimensions of x {} (at least one)",
                    op_name(op), normalized_shape.str(), x.shape().str()));
  return axis;
}
}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps) {
  const int axis = layer_norm_axis(x, normalized_shape, OpId::layer_norm);
  const Tensor w = weight.defined() ? weight : ones_like_shape(normalized_shape, x, 1.0);
  const Tensor b = bias.defined() ? bias : ones_like_shape(normalized_shape, x, 0.0);
  OpCall call =
      make_call(OpId::layer_norm, {x, w, b}, LayerNormAttrs{axis, static_cast<float>(eps)});
  run_op(call);
  return {call.outputs[0], call.outputs[1], call.outputs[2]};
}

NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                              const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                              double eps) {
  const int axis = layer_norm_axis(x, normalized_shape, OpId::layer_norm_backward);
  const Tensor w = weight.defined() ? weight : ones_like_shape(normalized_shape, x, 1.0);
  OpCall call = make_call(OpId::layer_norm_backward, {grad, x, w, mean, rstd},
                          LayerNormAttrs{axis, static_cast<float>(eps)});
  run_op(call);
  return {call.outputs[0], call.outputs[1], call.outputs[2]};
}

namespace {
std::int64_t channels(const Tensor& x, OpId op) {
  if (defined(x, op).rank() < 2)
    throw InvalidArgument(
        fmt::format("{}: x must be [N, C, ...], got {}", op_name(op), x.shape().str()));
  return x.dim(1);
}
}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           Tensor running_mean, Tensor running_var, bool training, double momentum,
                           double eps) {
  const std::int64_t c = channels(x, OpId::batch_norm);
  if (!running_mean.defined() || !running_var.defined()) {
    if (!training)
      throw InvalidArgument(
          "batch_norm: eval mode (training=false) needs running_mean and running_var");
    running_mean = ones_like_shape({c}, x, 0.0);  // scratch: the update is dropped
    running_var = ones_like_shape({c}, x, 1.0);
  }
  const Tensor w = weight.defined() ? weight : ones_like_shape({c}, x, 1.0);
  const Tensor b = bias.defined() ? bias : ones_like_shape({c}, x, 0.0);
  OpCall call =
      make_call(OpId::batch_norm, {x, w, b},
                BatchNormAttrs{training, static_cast<float>(momentum), static_cast<float>(eps)});
  call.outputs[0] = Tensor::empty(x.shape(), DType::f32, &x.device());
  call.outputs[1] = Tensor::empty({c}, DType::f32, &x.device());
  call.outputs[2] = Tensor::empty({c}, DType::f32, &x.device());
  call.outputs[3] = running_mean;
  call.outputs[4] = running_var;
  run_op(call);
  return {call.outputs[0], call.outputs[1], call.outputs[2]};
}

NormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd, bool training,
                              double eps) {
  const std::int64_t c = channels(x, OpId::batch_norm_backward);
  const Tensor w = weight.defined() ? weight : ones_like_shape({c}, x, 1.0);
  OpCall call = make_call(OpId::batch_norm_backward, {grad, x, w, save_mean, save_invstd},
                          BatchNormAttrs{training, 0.1f, static_cast<float>(eps)});
  run_op(call);
  return {call.outputs[0], call.outputs[1], call.outputs[2]};
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return run1(OpId::mse_loss, {input, target}, LossAttrs{reduction});
}

Tensor sum_squares(const Tensor& x) {
  return run1(OpId::sum_squares, {x}, NoAttrs{});
}

Tensor total_norm(std::span<const Tensor> tensors, double p) {
  if (tensors.empty()) throw InvalidArgument("total_norm: the list of tensors is empty");
  if (p != 2)
    throw InvalidArgument(fmt::format("total_norm: only p = 2 is implemented, got p = {}", p));
  // Each tensor's sum of squares into its own element of one vector, then one sum of that: no
  // chain of additions (a model's 76 gradients were 75 dependent launches).
  const auto n = static_cast<std::int64_t>(tensors.size());
  const Tensor sums = Tensor::empty({n}, DType::f32, &tensors.front().device());
  for (std::int64_t i = 0; i < n; ++i) {
    OpCall call = make_call(OpId::sum_squares, {tensors[static_cast<std::size_t>(i)]}, NoAttrs{});
    call.outputs[0] = sums.select(0, i);
    run_op(call);
  }
  const Tensor acc = n == 1 ? sums.reshape({}) : sum(sums, 0);
  // sqrt(acc) as exp(log(acc) / 2): the element-wise group owns sqrt. acc = 0 gives exp(-inf) = 0.
  return exp(mul_scalar(log(acc), 0.5));
}

void adamw_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                   const AdamAttrs& attrs) {
  OpCall call = make_call(OpId::adamw_update, {grad}, attrs);
  call.outputs[0] = param;
  call.outputs[1] = m;
  call.outputs[2] = v;
  run_op(call);
}

}  // namespace tessera
