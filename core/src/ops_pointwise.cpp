// Front-end of the element-wise math, comparison and selection ops (contracts in ops.h).
#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

Tensor run(OpId op, std::initializer_list<Tensor> inputs, OpAttrs attrs = NoAttrs{}) {
  OpCall call = make_call(op, inputs, std::move(attrs));
  run_op(call);
  return call.outputs[0];
}

// A one-element tensor holding |value| in the dtype and on the device of |like|: the scalar
// operand of the comparisons and of where, broadcast by the op.
Tensor scalar_like(OpId op, const Tensor& like, double value) {
  if (!like.defined())
    throw InvalidArgument(fmt::format("{}: the tensor operand is undefined", op_name(op)));
  return Tensor::full(Shape{}, value, like.dtype(), &like.device());
}

GeluAttrs gelu_attrs(OpId op, std::string_view approximate) {
  if (approximate == "none") return {GeluApproximate::none};
  if (approximate == "tanh") return {GeluApproximate::tanh};
  throw InvalidArgument(
      fmt::format("{}: approximate must be 'none' or 'tanh', got '{}'", op_name(op), approximate));
}

}  // namespace

Tensor neg(const Tensor& x) {
  return run(OpId::neg, {x});
}
Tensor abs(const Tensor& x) {
  return run(OpId::abs, {x});
}
Tensor sign(const Tensor& x) {
  return run(OpId::sign, {x});
}
Tensor sqrt(const Tensor& x) {
  return run(OpId::sqrt, {x});
}
Tensor rsqrt(const Tensor& x) {
  return run(OpId::rsqrt, {x});
}
Tensor pow(const Tensor& x, double exponent) {
  return run(OpId::pow, {x}, ScalarAttrs{exponent});
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  if (!min && !max) throw InvalidArgument("clamp: at least one of min and max must be given");
  ClampAttrs attrs;
  if (min) attrs.min = *min;
  if (max) attrs.max = *max;
  return run(OpId::clamp, {x}, attrs);
}
Tensor clamp_min(const Tensor& x, double min) {
  return clamp(x, min, std::nullopt);
}
Tensor clamp_max(const Tensor& x, double max) {
  return clamp(x, std::nullopt, max);
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  return run(OpId::gelu, {x}, gelu_attrs(OpId::gelu, approximate));
}
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate) {
  return run(OpId::gelu_backward, {grad, x}, gelu_attrs(OpId::gelu_backward, approximate));
}
Tensor silu(const Tensor& x) {
  return run(OpId::silu, {x});
}
Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  return run(OpId::silu_backward, {grad, x});
}
Tensor erf(const Tensor& x) {
  return run(OpId::erf, {x});
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return run(OpId::minimum, {a, b});
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return run(OpId::maximum, {a, b});
}

Tensor eq(const Tensor& a, const Tensor& b) {
  return run(OpId::eq, {a, b});
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return run(OpId::ne, {a, b});
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return run(OpId::lt, {a, b});
}
Tensor le(const Tensor& a, const Tensor& b) {
  return run(OpId::le, {a, b});
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return run(OpId::gt, {a, b});
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return run(OpId::ge, {a, b});
}
Tensor eq(const Tensor& a, double b) {
  return eq(a, scalar_like(OpId::eq, a, b));
}
Tensor ne(const Tensor& a, double b) {
  return ne(a, scalar_like(OpId::ne, a, b));
}
Tensor lt(const Tensor& a, double b) {
  return lt(a, scalar_like(OpId::lt, a, b));
}
Tensor le(const Tensor& a, double b) {
  return le(a, scalar_like(OpId::le, a, b));
}
Tensor gt(const Tensor& a, double b) {
  return gt(a, scalar_like(OpId::gt, a, b));
}
Tensor ge(const Tensor& a, double b) {
  return ge(a, scalar_like(OpId::ge, a, b));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return run(OpId::where, {cond, a, b});
}
Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_like(OpId::where, a, b));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, scalar_like(OpId::where, b, a), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return run(OpId::masked_fill, {x, mask}, ScalarAttrs{value});
}

}  // namespace tessera
