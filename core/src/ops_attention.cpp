// The attention front-end: the fused op, its backward, and the composed (math) form.
#include <array>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

AttentionAttrs attention_attrs(double dropout_p, bool is_causal, std::optional<double> scale,
                               std::uint64_t seed) {
  AttentionAttrs a;
  a.is_causal = is_causal;
  if (scale) a.scale = static_cast<float>(*scale);
  a.dropout_p = static_cast<float>(dropout_p);
  a.seed = seed;
  return a;
}

// |s| with |tail| in place of its last |drop| dims.
Shape reshaped(const Shape& s, int drop, std::initializer_list<std::int64_t> tail) {
  Shape r;
  for (int i = 0; i + drop < s.rank(); ++i) r.push_back(s[i]);
  for (std::int64_t d : tail) r.push_back(d);
  return r;
}

}  // namespace

std::pair<Tensor, Tensor> scaled_dot_product_attention_forward(const Tensor& query,
                                                               const Tensor& key,
                                                               const Tensor& value,
                                                               const AttentionAttrs& attrs) {
  OpCall call = make_call(OpId::scaled_dot_product_attention, {query, key, value}, attrs);
  run_op(call);
  return {call.outputs[0], call.outputs[1]};
}

namespace {

// The backward op, its gradients written into |into|'s tensors (run_op allocates undefined ones).
AttentionGrads run_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                            const Tensor& value, const Tensor& out, const Tensor& lse,
                            const AttentionAttrs& attrs, const AttentionGrads& into) {
  OpCall call = make_call(OpId::scaled_dot_product_attention_backward,
                          {grad_out, query, key, value, out, lse}, attrs);
  call.outputs[0] = into.query;
  call.outputs[1] = into.key;
  call.outputs[2] = into.value;
  run_op(call);
  return {call.outputs[0], call.outputs[1], call.outputs[2]};
}

}  // namespace

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                     const Tensor& key, const Tensor& value,
                                                     const Tensor& out, const Tensor& lse,
                                                     const AttentionAttrs& attrs) {
  return run_backward(grad_out, query, key, value, out, lse, attrs, {});
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                     const Tensor& key, const Tensor& value,
                                                     const Tensor& out, const Tensor& lse,
                                                     const AttentionAttrs& attrs,
                                                     const AttentionGrads& into) {
  const std::array<const Tensor*, 3> outs{&into.query, &into.key, &into.value};
  const std::array<const Tensor*, 3> ins{&query, &key, &value};
  constexpr std::array<const char*, 3> names{"query", "key", "value"};
  for (std::size_t i = 0; i < 3; ++i) {
    if (!ins[i]->defined()) continue;  // the op names it
    // The gradients' dtype: out_dtype (the rule checks it) or the input's.
    const DType dtype = attrs.out_dtype.value_or(ins[i]->dtype());
    if (!outs[i]->defined() || !(outs[i]->shape() == ins[i]->shape()) ||
        outs[i]->dtype() != dtype || &outs[i]->device() != &ins[i]->device())
      throw InvalidArgument(fmt::format(
          "scaled_dot_product_attention_backward: the gradient of {} must be written into a "
          "tensor of its shape {} and dtype ({}) on its device, got {}",
          names[i], ins[i]->shape().str(), dtype_name(dtype),
          outs[i]->defined() ? fmt::format("{} {} on {}", dtype_name(outs[i]->dtype()),
                                           outs[i]->shape().str(), outs[i]->device().id())
                             : std::string("an undefined tensor")));
  }
  return run_backward(grad_out, query, key, value, out, lse, attrs, into);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    double dropout_p, bool is_causal, std::optional<double> scale,
                                    std::uint64_t seed) {
  return scaled_dot_product_attention_forward(query, key, value,
                                              attention_attrs(dropout_p, is_causal, scale, seed))
      .first;
}

Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key,
                                         const Tensor& value, double dropout_p, bool is_causal,
                                         std::optional<double> scale, std::uint64_t seed) {
  const AttentionAttrs attrs = attention_attrs(dropout_p, is_causal, scale, seed);
  {
    // The fused op's shape rule checks the arguments, so both forms fail alike.
    OpCall call = make_call(OpId::scaled_dot_product_attention, {query, key, value}, attrs);
    std::array<TensorSpec, 2> specs{};
    op_def(call.op).infer(call, specs);
  }
  const std::int64_t l = query.dim(-2), s = key.dim(-2), e = query.dim(-1), ev = value.dim(-1);
  Device* dev = &query.device();
  // scores [..., L, S] = sum over E of q [..., L, 1, E] * k [..., 1, S, E]
  Tensor scores = sum(mul(query.reshape(reshaped(query.shape(), 2, {l, 1, e})),
                          key.reshape(reshaped(key.shape(), 2, {1, s, e}))),
                      -1);
  scores = mul_scalar(scores, attention_scale(attrs, e));
  if (is_causal) {
    std::vector<float> mask(static_cast<std::size_t>(l * s), 0.0f);
    for (std::int64_t i = 0; i < l; ++i)
      for (std::int64_t j = i + 1; j < s; ++j)
        mask[static_cast<std::size_t>(i * s + j)] = -std::numeric_limits<float>::infinity();
    scores = add(scores, Tensor::from(mask, Shape{l, s}, dev));
  }
  Tensor probs = softmax(scores, -1);
  if (attrs.dropout_p > 0) {
    Tensor mask = Tensor::empty(probs.shape(), probs.dtype(), dev);
    dropout_mask_(mask, DropoutAttrs{attrs.dropout_p, attrs.seed});
    probs = mul(probs, mask);
  }
  // out [..., L, Ev] = sum over S of p [..., L, S, 1] * v [..., 1, S, Ev]
  return sum(mul(probs.reshape(reshaped(probs.shape(), 1, {s, 1})),
                 value.reshape(reshaped(value.shape(), 2, {1, s, ev}))),
             -2);
}

}  // namespace tessera
