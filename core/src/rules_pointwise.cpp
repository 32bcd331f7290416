// Shape rules of the element-wise math, comparison and selection ops (op_table.cpp lists them).
#include "rules.h"

namespace tessera::rules {
namespace {

void require_numeric(const OpCall& call, const Tensor& t, const char* what) {
  require(t.dtype() != DType::boolean, call,
          "{} must be a number tensor, got bool; convert the mask with to(DType::f32) first", what);
}

void require_floating(const OpCall& call, const Tensor& t, const char* what) {
  require(is_floating_point(t.dtype()), call,
          "{} must be a floating-point tensor (f32, f64, f16, bf16), got {}; convert it with "
          "to(DType::f32) first",
          what, dtype_name(t.dtype()));
}

void require_bool(const OpCall& call, const Tensor& t, const char* what) {
  require(t.dtype() == DType::boolean, call,
          "{} must be a bool mask (as the comparisons make), got {}", what, dtype_name(t.dtype()));
}

void require_same_dtype(const OpCall& call, const Tensor& a, const Tensor& b, const char* an,
                        const char* bn) {
  require(a.dtype() == b.dtype(), call, "{} and {} must have the same dtype, got {} and {}", an, bn,
          dtype_name(a.dtype()), dtype_name(b.dtype()));
}

// broadcast_shapes, with the op's name in the message.
Shape broadcast(const OpCall& call, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", op_name(call.op), e.what()));
  }
}

void check_gelu_attrs(const OpCall& call) {
  const GeluApproximate a = call.attr<GeluAttrs>().approximate;
  require(a == GeluApproximate::none || a == GeluApproximate::tanh, call,
          "approximate must be none or tanh, got {}", static_cast<int>(a));
}

}  // namespace

void infer_numeric_unary(const OpCall& call, std::span<TensorSpec> out) {
  require_numeric(call, call.in(0), "x");
  out[0] = {call.in(0).shape(), call.in(0).dtype()};
}

void infer_float_unary(const OpCall& call, std::span<TensorSpec> out) {
  require_floating(call, call.in(0), "x");
  out[0] = {call.in(0).shape(), call.in(0).dtype()};
}

void infer_gelu(const OpCall& call, std::span<TensorSpec> out) {
  check_gelu_attrs(call);
  infer_float_unary(call, out);
}

void infer_pointwise_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &x = call.in(1);
  require_same_shape(call, grad, x, "grad", "x");
  require_floating(call, x, "x");
  require_same_dtype(call, grad, x, "grad", "x");
  out[0] = {x.shape(), x.dtype()};
}

void infer_gelu_backward(const OpCall& call, std::span<TensorSpec> out) {
  check_gelu_attrs(call);
  infer_pointwise_backward(call, out);
}

void infer_min_max(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &a = call.in(0), &b = call.in(1);
  require_numeric(call, a, "a");
  require_same_dtype(call, a, b, "a", "b");
  out[0] = {broadcast(call, a.shape(), b.shape()), a.dtype()};
}

void infer_compare(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &a = call.in(0), &b = call.in(1);
  require_numeric(call, a, "a");
  require_same_dtype(call, a, b, "a", "b");
  out[0] = {broadcast(call, a.shape(), b.shape()), DType::boolean};
}

void infer_where(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &cond = call.in(0), &a = call.in(1), &b = call.in(2);
  require_bool(call, cond, "cond");
  require_numeric(call, a, "a");
  require_same_dtype(call, a, b, "a", "b");
  out[0] = {broadcast(call, broadcast(call, cond.shape(), a.shape()), b.shape()), a.dtype()};
}

void infer_masked_fill(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &x = call.in(0), &mask = call.in(1);
  require_numeric(call, x, "x");
  require_bool(call, mask, "mask");
  out[0] = {broadcast(call, x.shape(), mask.shape()), x.dtype()};
}

}  // namespace tessera::rules
