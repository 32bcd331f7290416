// The gradient rule of scaled dot-product attention.
#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/autocast.h"
#include "tessera/train/autograd.h"

namespace tessera::train {

namespace {

AttentionAttrs attention_attrs(double dropout_p, bool is_causal, std::optional<double> scale,
                               std::uint64_t seed) {
  AttentionAttrs attrs;
  attrs.is_causal = is_causal;
  if (scale) attrs.scale = static_cast<float>(*scale);
  attrs.dropout_p = static_cast<float>(dropout_p);
  attrs.seed = seed;
  return attrs;
}

// The dtype autocast runs attention in for these f32 inputs (nullopt: as they are). As torch's
// autocast, attention is one of the ops it lowers; unlike torch's, the result and the gradients
// stay f32 (AttentionAttrs::out_dtype), as autocast's products do (autocast.h).
std::optional<DType> autocast_attention(std::initializer_list<const Variable*> inputs) {
  const std::optional<DType> lo = autocast_dtype();
  if (!lo) return std::nullopt;
  for (const Variable* v : inputs)
    if (v->value().dtype() != DType::f32) return std::nullopt;
  return lo;
}

}  // namespace

Variable scaled_dot_product_attention(const Variable& query, const Variable& key,
                                      const Variable& value, double dropout_p, bool is_causal,
                                      std::optional<double> scale, std::uint64_t seed) {
  AttentionAttrs attrs = attention_attrs(dropout_p, is_causal, scale, seed);
  // The op takes contiguous inputs (the dispatcher copies views such as a model's heads, split
  // and permuted out of one projection); the rule keeps these copies, so that the backward does
  // not make them again. They take the memory the views would have kept alive. Under autocast
  // the copies are the casts (one kernel each, from the views), the result and the gradients f32.
  const std::optional<DType> lo = autocast_attention({&query, &key, &value});
  if (lo) attrs.out_dtype = DType::f32;
  auto input = [&lo](const Variable& x) { return lo ? x.value().to(*lo) : x.value().contiguous(); };
  const Tensor q = input(query), k = input(key), v = input(value);
  const auto result = scaled_dot_product_attention_forward(q, k, v, attrs);
  const Tensor &out = result.first, &lse = result.second;
  // The rule keeps the three inputs, the output and the log-sum-exp of every row: the backward
  // recomputes the probabilities from them.
  return make_result(
      out, {query, key, value}, [q, k, v, out, lse, attrs](const Tensor& g) -> std::vector<Tensor> {
        AttentionGrads d = scaled_dot_product_attention_backward(g, q, k, v, out, lse, attrs);
        return {d.query, d.key, d.value};
      });
}

Variable scaled_dot_product_attention_packed(const Variable& qkv, double dropout_p, bool is_causal,
                                             std::optional<double> scale, std::uint64_t seed) {
  const Shape& s = qkv.shape();
  if (s.rank() < 3 || s[0] != 3)
    throw InvalidArgument(fmt::format(
        "scaled_dot_product_attention_packed: expects qkv [3, ..., L, E] (query, key and value "
        "stacked in the first dimension), got {}",
        s.str()));
  AttentionAttrs attrs = attention_attrs(dropout_p, is_causal, scale, seed);
  // Under autocast, qkv cast in one kernel (from the view) and the result and gradient in f32.
  const std::optional<DType> lo = autocast_attention({&qkv});
  if (lo) attrs.out_dtype = DType::f32;
  const Tensor packed = lo ? qkv.value().to(*lo) : qkv.value().contiguous();
  const auto result = scaled_dot_product_attention_forward(packed.select(0, 0), packed.select(0, 1),
                                                           packed.select(0, 2), attrs);
  const Tensor &out = result.first, &lse = result.second;
  // The backward writes the three gradients into the slices of one tensor, qkv's gradient.
  return make_result(out, {qkv}, [packed, out, lse, attrs](const Tensor& g) -> std::vector<Tensor> {
    const Tensor grad =
        Tensor::empty(packed.shape(), attrs.out_dtype.value_or(packed.dtype()), &packed.device());
    scaled_dot_product_attention_backward(
        g, packed.select(0, 0), packed.select(0, 1), packed.select(0, 2), out, lse, attrs,
        AttentionGrads{grad.select(0, 0), grad.select(0, 1), grad.select(0, 2)});
    return {grad};
  });
}

}  // namespace tessera::train
