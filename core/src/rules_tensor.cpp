// Shape rules of the tensor API's ops: cast, copy_into, arange, rand/randn/randint, index_select.
#include <cmath>

#include "rules.h"

namespace tessera::rules {
namespace {

bool castable(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 ||
         t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::boolean;
}

bool is_integer(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8;
}

// Counter-based streams index elements with 32 bits.
void require_u32_count(const OpCall& call, const TensorSpec& s) {
  require(s.shape.numel() <= (std::int64_t{1} << 32), call,
          "random tensors are limited to 2^32 elements, got {}", s.shape.str());
}

}  // namespace

void infer_cast(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor& x = call.in(0);
  require(out[0].shape == x.shape(), call, "the output must have the input's shape {}, got {}",
          x.shape().str(), out[0].shape.str());
  require(castable(x.dtype()) && castable(out[0].dtype), call,
          "casts are between f32, f64, f16, bf16, i32, i64, u8 and bool, got {} to {}",
          dtype_name(x.dtype()), dtype_name(out[0].dtype));
}

void infer_copy_into(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor& src = call.in(0);
  const Tensor& dst = call.out(0);
  require(src.dtype() == out[0].dtype, call, "src is {} but the destination is {}",
          dtype_name(src.dtype()), dtype_name(out[0].dtype));
  require(broadcast_shapes(src.shape(), out[0].shape) == out[0].shape, call,
          "src {} can not be broadcast to the destination {}", src.shape().str(),
          out[0].shape.str());
  if (dst.defined())
    for (int i = 0; i < dst.rank(); ++i)
      require(dst.strides()[i] != 0 || dst.shape()[i] <= 1, call,
              "the destination {} has stride 0 in dimension {}: several of its elements are one "
              "memory location (an expanded tensor can not be written)",
              dst.shape().str(), i);
}

void infer_arange(const OpCall& call, std::span<TensorSpec> out) {
  const auto& at = call.attr<RangeAttrs>();
  require(out[0].shape.rank() == 1, call, "the output must have rank 1, got {}",
          out[0].shape.str());
  require(std::isfinite(at.start) && std::isfinite(at.step) && at.step != 0, call,
          "start {} and step {} must be finite and step non-zero", at.start, at.step);
  const DType t = out[0].dtype;
  require(t == DType::f32 || t == DType::f64 || is_integer(t), call,
          "arange makes f32, f64, i32, i64 or u8, not {}", dtype_name(t));
  if (is_integer(t))
    require(at.start == std::trunc(at.start) && at.step == std::trunc(at.step), call,
            "an integer arange needs whole start and step, got {} and {}", at.start, at.step);
}

void infer_random(const OpCall& call, std::span<TensorSpec> out) {
  require_u32_count(call, out[0]);
  const DType t = out[0].dtype;
  if (call.op == OpId::randint) {
    const auto& at = call.attr<RandomAttrs>();
    require(t == DType::i32 || t == DType::i64 || t == DType::f32, call,
            "randint makes i32, i64 or f32, not {}", dtype_name(t));
    require(
        at.low < at.high &&
            static_cast<std::uint64_t>(at.high) - static_cast<std::uint64_t>(at.low) <= 0xffffffffu,
        call, "needs low < high with high - low < 2^32, got low {} and high {}", at.low, at.high);
    if (t == DType::i32)
      require(at.low >= INT32_MIN && at.high - 1 <= INT32_MAX, call, "[{}, {}) does not fit in i32",
              at.low, at.high);
  } else {
    require(t == DType::f32, call, "{} makes f32, not {}", op_name(call.op), dtype_name(t));
  }
}

namespace {

void check_index(const OpCall& call, const Tensor& x, const Tensor& index) {
  const int axis = call.attr<AxisAttrs>().axis;
  require(axis >= 0 && axis < x.rank(), call, "dim {} is out of range for shape {}", axis,
          x.shape().str());
  require(index.rank() <= 1, call, "index must have rank 0 or 1, got {}", index.shape().str());
  require(index.dtype() == DType::i32 || index.dtype() == DType::i64, call,
          "index must be i32 or i64, got {}", dtype_name(index.dtype()));
}

}  // namespace

void infer_index_select(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &x = call.in(0), &index = call.in(1);
  require(x.rank() >= 1, call, "x must have rank 1 or more, got {}", x.shape().str());
  check_index(call, x, index);
  Shape s = x.shape();
  s[call.attr<AxisAttrs>().axis] = index.numel();
  out[0] = {s, x.dtype()};
}

void infer_index_select_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &index = call.in(1);
  require(grad.dtype() == DType::f32, call, "grad must be f32, got {}", dtype_name(grad.dtype()));
  require(out[0].dtype == DType::f32, call, "the output must be f32, got {}",
          dtype_name(out[0].dtype));
  check_index(call, grad, index);
  const int axis = call.attr<AxisAttrs>().axis;
  Shape want = out[0].shape;
  require(want.rank() == grad.rank(), call, "the output {} must have the rank of grad {}",
          want.str(), grad.shape().str());
  want[axis] = index.numel();
  require(want == grad.shape(), call,
          "grad {} must be the output {} with dim {} of the index's length {}", grad.shape().str(),
          out[0].shape.str(), axis, index.numel());
}

}  // namespace tessera::rules
