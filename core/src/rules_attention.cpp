// Shape rules of scaled dot-product attention and its backward.
#include <cmath>

#include "rules.h"
#include "tessera/checked.h"

namespace tessera::rules {
namespace {

// The leading (batch) dims of |t|: every dim but the last two.
Shape batch_dims(const Tensor& t) {
  Shape s;
  for (int i = 0; i + 2 < t.rank(); ++i) s.push_back(t.dim(i));
  return s;
}

Shape with(Shape s, std::initializer_list<std::int64_t> tail) {
  for (std::int64_t d : tail) s.push_back(d);
  return s;
}

// Checks q, k, v and the attributes; returns q's batch dims.
Shape check_qkv(const OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v) {
  require(q.rank() >= 2 && k.rank() >= 2 && v.rank() >= 2, call,
          "query {}, key {} and value {} must be [..., L, E], [..., S, E] and [..., S, Ev]",
          q.shape().str(), k.shape().str(), v.shape().str());
  require(is_floating_point(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), call,
          "query, key and value must have one floating-point dtype, got {}, {} and {}",
          dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  const Shape batch = batch_dims(q);
  require(batch == batch_dims(k) && batch == batch_dims(v), call,
          "query {}, key {} and value {} must have the same leading (batch) dims (broadcasting "
          "them is not supported)",
          q.shape().str(), k.shape().str(), v.shape().str());
  require(k.dim(-1) == q.dim(-1), call,
          "key {} must have the embedding size of query {} ({}) in its last dim", k.shape().str(),
          q.shape().str(), q.dim(-1));
  require(v.dim(-2) == k.dim(-2), call, "value {} must have one row per key of key {} ({})",
          v.shape().str(), k.shape().str(), k.dim(-2));
  const auto& at = call.attr<AttentionAttrs>();
  require(at.dropout_p >= 0 && at.dropout_p < 1, call, "dropout_p must be in [0, 1), got {}",
          at.dropout_p);
  require(!at.scale || std::isfinite(*at.scale), call, "scale must be finite, got {}",
          at.scale.value_or(0.0f));
  if (at.dropout_p > 0) {
    const std::int64_t probs =
        mul_or_throw(mul_or_throw(batch.numel(), q.dim(-2), "attention probabilities"), k.dim(-2),
                     "attention probabilities");
    require(probs <= (std::int64_t{1} << 32), call,
            "with dropout the probabilities [..., {}, {}] are limited to 2^32 elements, got {}",
            q.dim(-2), k.dim(-2), probs);
  }
  return batch;
}

// The dtype of out and of the backward's gradients: out_dtype (f32 for 16-bit inputs) or q's.
DType attention_out_dtype(const OpCall& call, DType in) {
  const std::optional<DType> want = call.attr<AttentionAttrs>().out_dtype;
  if (!want || *want == in) return in;
  require(*want == DType::f32 && is_16bit_float(in), call,
          "out_dtype {} for {} inputs: pass f32 with f16 or bf16 inputs (out and the gradients "
          "in f32), or leave it unset for the inputs' dtype",
          dtype_name(*want), dtype_name(in));
  return *want;
}

// lse is f32 for 16-bit inputs, else in their dtype.
DType lse_dtype(DType in) {
  return is_16bit_float(in) ? DType::f32 : in;
}

}  // namespace

void infer_attention(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &q = call.in(0), &k = call.in(1), &v = call.in(2);
  const Shape batch = check_qkv(call, q, k, v);
  out[0] = {with(batch, {q.dim(-2), v.dim(-1)}), attention_out_dtype(call, q.dtype())};
  out[1] = {with(batch, {q.dim(-2)}), lse_dtype(q.dtype())};
}

void infer_attention_backward(const OpCall& call, std::span<TensorSpec> out) {
  const Tensor &grad = call.in(0), &q = call.in(1), &k = call.in(2), &v = call.in(3);
  const Tensor &o = call.in(4), &lse = call.in(5);
  const Shape batch = check_qkv(call, q, k, v);
  const Shape out_shape = with(batch, {q.dim(-2), v.dim(-1)});
  require(grad.shape() == out_shape && o.shape() == out_shape, call,
          "grad_out {} and out {} must have the shape of the forward's output {}",
          grad.shape().str(), o.shape().str(), out_shape.str());
  require(lse.shape() == with(batch, {q.dim(-2)}), call,
          "lse {} must have one value per query row, {}", lse.shape().str(),
          with(batch, {q.dim(-2)}).str());
  const DType od = attention_out_dtype(call, q.dtype());
  require(grad.dtype() == od && o.dtype() == od && lse.dtype() == lse_dtype(q.dtype()), call,
          "grad_out, out and lse must have the forward's dtypes ({}, {} and {} for {} inputs), "
          "got {}, {} and {}",
          dtype_name(od), dtype_name(od), dtype_name(lse_dtype(q.dtype())), dtype_name(q.dtype()),
          dtype_name(grad.dtype()), dtype_name(o.dtype()), dtype_name(lse.dtype()));
  out[0] = {q.shape(), od};
  out[1] = {k.shape(), od};
  out[2] = {v.shape(), od};
}

}  // namespace tessera::rules
