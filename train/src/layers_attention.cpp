// MultiheadAttention (torch.nn's) and CausalSelfAttention (nanoGPT's).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train/init.h"
#include "tessera/train/layers.h"

namespace tessera::train {

namespace {

// [B, T, 3 * H * D] (q, k and v side by side) -> [3, B, H, T, D], a view.
Variable packed_heads(const Variable& qkv, std::int64_t heads) {
  const Shape& s = qkv.shape();
  return permute(reshape(qkv, Shape{s[0], s[1], 3, heads, s[2] / (3 * heads)}), {2, 0, 3, 1, 4});
}

// [B, T, H * D] -> [B, H, T, D].
Variable split_heads(const Variable& x, std::int64_t heads) {
  const Shape& s = x.shape();
  return permute(reshape(x, Shape{s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

// [B, H, T, D] -> [B, T, H * D].
Variable merge_heads(const Variable& x) {
  const Shape& s = x.shape();
  return reshape(permute(x, {0, 2, 1, 3}), Shape{s[0], s[2], s[1] * s[3]});
}

// x [..., in] @ w^T + b for any leading dimensions.
Variable project(const Variable& x, const Variable& w, const Variable& b) {
  Shape out = x.shape();
  const std::int64_t in = out[out.rank() - 1];
  out[out.rank() - 1] = w.shape()[0];
  return reshape(linear(reshape(x, Shape{-1, in}), w, b), out);
}

}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                                       double dropout, bool bias, bool batch_first, Generator* gen)
    : e_(embed_dim),
      h_(num_heads),
      dropout_(dropout),
      batch_first_(batch_first),
      stream_(next_dropout_stream()) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0 ||
      !(dropout >= 0 && dropout < 1))
    throw InvalidArgument(fmt::format(
        "MultiheadAttention(embed_dim={}, num_heads={}, dropout={}): sizes must be positive, "
        "num_heads must divide embed_dim and dropout be in [0, 1)",
        embed_dim, num_heads, dropout));
  Generator& g = gen ? *gen : default_init_generator();
  in_proj_weight = register_parameter("in_proj_weight", init::xavier_uniform(Shape{3 * e_, e_}, g));
  in_proj_bias =
      register_parameter("in_proj_bias", bias ? Tensor::full(Shape{3 * e_}, 0.0) : Tensor());
  out_proj = register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(
                                             e_, e_, bias, Init::torch_default, &g));
  if (bias) out_proj->bias.set_value(Tensor::full(Shape{e_}, 0.0));
}

Variable MultiheadAttention::forward(const Variable& query, const Variable& key,
                                     const Variable& value, const Tensor& attn_mask,
                                     bool is_causal) {
  const int rank = query.shape().rank();
  auto fail = [&](const std::string& why) {
    return InvalidArgument(
        fmt::format("MultiheadAttention(embed_dim={}, num_heads={}): query {}, "
                    "key {}, value {}: {}",
                    e_, h_, query.shape().str(), key.shape().str(), value.shape().str(), why));
  };
  if ((rank != 2 && rank != 3) || key.shape().rank() != rank || value.shape().rank() != rank)
    throw fail("expects query, key and value all 3-D (batched) or all 2-D (unbatched)");
  // To [B, T, E].
  auto batched = [&](const Variable& x) {
    if (rank == 2) return unsqueeze(x, 0);
    return batch_first_ ? x : transpose(x, 0, 1);
  };
  const bool self_attention = query.node() == key.node() && key.node() == value.node();
  const Variable q0 = batched(query), k0 = batched(key), v0 = batched(value);
  const std::int64_t B = q0.shape()[0], L = q0.shape()[1], S = k0.shape()[1];
  if (q0.shape()[2] != e_ || k0.shape()[2] != e_ || v0.shape()[2] != e_)
    throw fail(fmt::format("the last dimension must be embed_dim {}", e_));
  if (k0.shape()[0] != B || v0.shape()[0] != B || v0.shape()[1] != S)
    throw fail("key and value must have the batch of query and the same length");
  if (attn_mask.defined() && is_causal) throw fail("give attn_mask or is_causal, not both");

  const double p = training_ ? dropout_ : 0.0;
  // The heads' outputs [B, H, L, Ev] through out_proj, in the caller's layout.
  auto finish = [&](const Variable& y) {
    Variable out = (*out_proj)(merge_heads(y));
    if (rank == 2) return squeeze(out, 0);
    return batch_first_ ? out : transpose(out, 0, 1);
  };
  if (self_attention && !attn_mask.defined()) {
    // One projection and one copy of its heads, the gradient likewise (packed attention).
    return finish(scaled_dot_product_attention_packed(
        packed_heads(project(q0, in_proj_weight, in_proj_bias), h_), p, is_causal, std::nullopt,
        dropout_seed(stream_)));
  }
  Variable q, k, v;
  if (self_attention) {
    std::vector<Variable> qkv = chunk(project(q0, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    const std::vector<Variable> w = chunk(in_proj_weight, 3, 0);
    std::vector<Variable> b(3);
    if (in_proj_bias.defined()) b = chunk(in_proj_bias, 3, 0);
    q = project(q0, w[0], b[0]);
    k = project(k0, w[1], b[1]);
    v = project(v0, w[2], b[2]);
  }
  q = split_heads(q, h_);
  k = split_heads(k, h_);
  v = split_heads(v, h_);
  Variable y;
  if (!attn_mask.defined()) {
    y = scaled_dot_product_attention(q, k, v, p, is_causal, std::nullopt, dropout_seed(stream_));
  } else {
    // torch's math path: scores + mask, softmax, dropout, @ value.
    const Shape& m = attn_mask.shape();
    Tensor mask;
    if (m.rank() == 2 && m[0] == L && m[1] == S)
      mask = attn_mask.reshape(Shape{1, 1, L, S});
    else if (m.rank() == 3 && m[0] == B * h_ && m[1] == L && m[2] == S)
      mask = attn_mask.reshape(Shape{B, h_, L, S});
    else
      throw fail(fmt::format("attn_mask {} must be [L, S] = [{}, {}] or [B * num_heads, L, S]",
                             m.str(), L, S));
    Variable scores =
        mul_scalar(matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(e_ / h_)));
    if (attn_mask.dtype() == DType::boolean)
      scores = masked_fill(scores, mask.expand(scores.shape()).contiguous(),
                           -std::numeric_limits<double>::infinity());
    else if (attn_mask.dtype() == DType::f32)
      scores = add(scores, Variable(mask));
    else
      throw fail(
          fmt::format("attn_mask must be bool or f32, got {}", dtype_name(attn_mask.dtype())));
    Variable probs = softmax(scores, -1);
    if (p > 0) probs = train::dropout(probs, static_cast<float>(p), dropout_seed(stream_));
    y = matmul(probs, v);
  }
  return finish(y);
}

CausalSelfAttention::CausalSelfAttention(std::int64_t n_embd, std::int64_t n_head, double dropout,
                                         bool bias, Generator* gen)
    : c_(n_embd), h_(n_head), dropout_(dropout) {
  if (n_embd <= 0 || n_head <= 0 || n_embd % n_head != 0)
    throw InvalidArgument(fmt::format(
        "CausalSelfAttention(n_embd={}, n_head={}): sizes must be positive and n_head must "
        "divide n_embd",
        n_embd, n_head));
  c_attn = register_module("c_attn",
                           std::make_shared<Linear>(c_, 3 * c_, bias, Init::torch_default, gen));
  c_proj =
      register_module("c_proj", std::make_shared<Linear>(c_, c_, bias, Init::torch_default, gen));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(dropout));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(dropout));
}

Variable CausalSelfAttention::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.rank() != 3 || s[2] != c_)
    throw InvalidArgument(
        fmt::format("CausalSelfAttention(n_embd={}, n_head={}): expects x [B, T, {}], got {}", c_,
                    h_, c_, s.str()));
  // q, k and v of every head in one copy, and their gradient in one tensor (packed attention).
  const double p = attn_dropout->is_training() ? dropout_ : 0.0;
  Variable y = scaled_dot_product_attention_packed(
      packed_heads((*c_attn)(x), h_), p, true, std::nullopt, dropout_seed(attn_dropout->stream()));
  return (*resid_dropout)((*c_proj)(merge_heads(y)));
}

}  // namespace tessera::train
