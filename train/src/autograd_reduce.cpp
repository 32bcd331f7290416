// Gradient rules of the reductions, normalisation and losses group (autograd.h).
#include <array>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/autograd.h"

namespace tessera::train {
namespace {

using Grads = std::vector<Tensor>;

bool wants(const Variable& v) {
  return v.defined() && v.requires_grad();
}

// |s| with the axes |dims| (all for an empty list) set to 1.
Shape keep_shape(const Shape& s, const std::vector<int>& dims) {
  Shape r = s;
  if (dims.empty())
    for (int i = 0; i < s.rank(); ++i) r[i] = 1;
  for (int d : dims) r[s.normalize_axis(d)] = 1;
  return r;
}

// |g| of a reduction to |keep| (keepdim or not) spread back over |shape|.
Tensor spread(const Tensor& g, const Shape& keep, const Shape& shape) {
  return tessera::copy(g.reshape(keep).expand(shape));
}

Shape keep_axis(const Shape& s, int axis) {
  Shape r = s;
  r[axis] = 1;
  return r;
}

}  // namespace

Variable sum(const Variable& x, const std::vector<int>& dims, bool keepdim) {
  return make_result(tessera::sum(x.value(), dims, keepdim), {x},
                     [s = x.shape(), dims](const Tensor& g) -> Grads {
                       return {spread(g, keep_shape(s, dims), s)};
                     });
}

Variable mean(const Variable& x, const std::vector<int>& dims, bool keepdim) {
  const Tensor y = tessera::mean(x.value(), dims, keepdim);
  return make_result(y, {x}, [s = x.shape(), dims, n = y.numel()](const Tensor& g) -> Grads {
    const double count = static_cast<double>(s.numel()) / static_cast<double>(n);
    return {tessera::mul_scalar(spread(g, keep_shape(s, dims), s), 1.0 / count)};
  });
}

Variable min(const Variable& x, int axis, bool keepdim) {
  const int ax = x.shape().normalize_axis(axis);
  return make_result(tessera::min(x.value(), ax, keepdim), {x}, [x, ax](const Tensor& g) -> Grads {
    return {tessera::min_backward(g, x.value(), ax)};
  });
}

namespace {
// d var / dx = 2 (x - mean) / (n - correction), times |g| (reduced shape) spread over x; for std,
// g / (2 std) first.
Variable var_or_std(const Variable& x, int axis, double correction, bool keepdim, bool is_std) {
  const int ax = x.shape().normalize_axis(axis);
  const Tensor y = is_std ? tessera::std(x.value(), ax, correction, keepdim)
                          : tessera::var(x.value(), ax, correction, keepdim);
  return make_result(y, {x}, [x, y, ax, correction, is_std](const Tensor& g) -> Grads {
    const Shape keep = keep_axis(x.shape(), ax);
    const double div = std::max(static_cast<double>(x.shape()[ax]) - correction, 0.0);
    const Tensor centred = tessera::sub(x.value(), tessera::mean(x.value(), ax, true));
    const Tensor gk = is_std ? tessera::div(g.reshape(keep), y.reshape(keep)) : g.reshape(keep);
    return {tessera::mul_scalar(tessera::mul(centred, gk), (is_std ? 1.0 : 2.0) / div)};
  });
}
}  // namespace

Variable var(const Variable& x, int axis, double correction, bool keepdim) {
  return var_or_std(x, axis, correction, keepdim, false);
}

Variable std(const Variable& x, int axis, double correction, bool keepdim) {
  return var_or_std(x, axis, correction, keepdim, true);
}

Variable prod(const Variable& x, int axis, bool keepdim) {
  const int ax = x.shape().normalize_axis(axis);
  return make_result(tessera::prod(x.value(), ax, keepdim), {x}, [x, ax](const Tensor& g) -> Grads {
    return {tessera::prod_backward(g, x.value(), ax)};
  });
}

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                    const Variable& bias, double eps) {
  const Tensor w = weight.defined() ? weight.value() : Tensor();
  const Tensor b = bias.defined() ? bias.value() : Tensor();
  LayerNormResult r = tessera::layer_norm(x.value(), normalized_shape, w, b, eps);
  return make_result(
      r.y, {x, weight, bias},
      [x, w, normalized_shape, eps, mean = r.mean, rstd = r.rstd](const Tensor& g) -> Grads {
        NormGrads d =
            tessera::layer_norm_backward(g, x.value(), normalized_shape, mean, rstd, w, eps);
        return {d.x, d.weight, d.bias};
      });
}

Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    double momentum, double eps) {
  const Tensor w = weight.defined() ? weight.value() : Tensor();
  const Tensor b = bias.defined() ? bias.value() : Tensor();
  BatchNormResult r =
      tessera::batch_norm(x.value(), w, b, running_mean, running_var, training, momentum, eps);
  return make_result(
      r.y, {x, weight, bias},
      [x, w, training, eps, mean = r.save_mean, invstd = r.save_invstd](const Tensor& g) -> Grads {
        NormGrads d = tessera::batch_norm_backward(g, x.value(), w, mean, invstd, training, eps);
        return {d.x, d.weight, d.bias};
      });
}

Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction) {
  return make_result(tessera::mse_loss(input.value(), target.value(), reduction), {input, target},
                     [input, target, reduction](const Tensor& g) -> Grads {
                       // d/d input = 2 (input - target) g (/ n for the mean); target gets minus.
                       const Tensor d = tessera::sub(input.value(), target.value());
                       const double n = static_cast<double>(d.numel());
                       const double k = reduction == Reduction::mean ? 2.0 / n : 2.0;
                       const Tensor gi = tessera::mul_scalar(tessera::mul(d, g), k);
                       return {gi, wants(target) ? tessera::mul_scalar(gi, -1.0) : Tensor()};
                     });
}

}  // namespace tessera::train
