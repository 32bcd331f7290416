// Launch geometry of scaled dot-product attention (kernels/attention_*.tk): the forward is one
// fused kernel per (batch*head, 64 query rows); the backward is delta = rowsum(grad_out * out),
// then one kernel per (batch*head, 64 keys) for dk and dv and one per (batch*head, 64 query rows)
// for dq, each recomputing the probabilities from lse (no [L, S] tensor, no atomics). A kernel
// accumulates at most 128 columns of its outputs; wider heads take one launch per 128 columns.
#include <algorithm>

#include "geometry.h"
#include "ops.h"

namespace tessera::common {
namespace {

constexpr std::int64_t kBlock = 64;   // query rows or keys per work-group
constexpr std::int64_t kSlice = 128;  // output columns per launch (16 invocations x 8)

struct Attn {
  std::int64_t bh, l, s, e, ev;
  float scale, p, keep;
  std::int32_t causal;
  std::int32_t key;
};

Attn attn(const OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto& a = call.attr<AttentionAttrs>();
  Attn g{};
  g.bh = 1;
  for (int i = 0; i + 2 < q.rank(); ++i) g.bh *= q.dim(i);
  g.l = q.dim(-2);
  g.e = q.dim(-1);
  g.s = k.dim(-2);
  g.ev = v.dim(-1);
  g.scale = attention_scale(a, g.e);
  g.p = a.dropout_p;
  g.keep = 1.0f / (1.0f - a.dropout_p);
  g.causal = a.is_causal ? 1 : 0;
  g.key = static_cast<std::int32_t>(dropout_key(a.seed));
  return g;
}

std::int64_t blocks(std::int64_t n) {
  return (n + kBlock - 1) / kBlock;
}
// Launches needed for |n| output columns (one at least: the forward writes lse, the others
// their zeros).
std::int64_t slices(std::int64_t n) {
  return std::max<std::int64_t>(1, (n + kSlice - 1) / kSlice);
}
// Columns of slice |i| of |n|, and the invocation's columns for them (V0 of the kernels).
std::int64_t width(std::int64_t n, std::int64_t i) {
  return std::clamp<std::int64_t>(n - i * kSlice, 0, kSlice);
}
// Rounded up to 2, 4 or 8: each value is a pipeline or program to build, so few of them.
std::int32_t per_invocation(std::int64_t w) {
  const std::int64_t n = (w + 15) / 16;
  return n <= 2 ? 2 : n <= 4 ? 4 : 8;
}

void attention(const OpCall& call, Launcher& l) {
  const Attn g = attn(call, call.in(0), call.in(1), call.in(2));
  for (std::int64_t i = 0; i < slices(g.ev); ++i) {
    const std::int64_t w = width(g.ev, i);
    Launch(l, "attention_fwd", {per_invocation(w)})
        .in(call.in(0))
        .in(call.in(1))
        .in(call.in(2))
        .out(call.out(0))
        .out(call.out(1))
        .i(g.l)
        .i(g.s)
        .i(g.e)
        .i(g.ev)
        .i(i * kSlice)
        .i(w)
        .f(g.scale)
        .i(g.causal)
        .f(g.p)
        .i(g.key)
        .f(g.keep)
        .i(blocks(g.l))
        .i(i == 0 ? 1 : 0)
        .shared(7456)
        .group(256)
        .groups(g.bh * blocks(g.l));
  }
}

void attention_backward(const OpCall& call, Launcher& l) {
  const Tensor &grad = call.in(0), &q = call.in(1), &k = call.in(2), &v = call.in(3);
  const Tensor &out = call.in(4), &lse = call.in(5);
  const Attn g = attn(call, q, k, v);
  const Tensor delta = Tensor::empty(lse.shape(), DType::f32, &l.device());
  Launch(l, "attention_delta").in(grad).in(out).out(delta).i(g.bh * g.l).i(g.ev).run(g.bh * g.l);
  for (std::int64_t i = 0; i < slices(std::max(g.e, g.ev)); ++i) {
    const std::int64_t wk = width(g.e, i), wv = width(g.ev, i);
    Launch(l, "attention_bwd_kv", {per_invocation(wk), per_invocation(wv)})
        .in(q)
        .in(k)
        .in(v)
        .in(grad)
        .in(lse)
        .in(delta)
        .out(call.out(1))
        .out(call.out(2))
        .i(g.l)
        .i(g.s)
        .i(g.e)
        .i(g.ev)
        .i(i * kSlice)
        .i(wk)
        .i(i * kSlice)
        .i(wv)
        .f(g.scale)
        .i(g.causal)
        .f(g.p)
        .i(g.key)
        .f(g.keep)
        .i(blocks(g.s))
        .shared(10528)
        .group(256)
        .groups(g.bh * blocks(g.s));
  }
  for (std::int64_t i = 0; i < slices(g.e); ++i) {
    const std::int64_t w = width(g.e, i);
    Launch(l, "attention_bwd_q", {per_invocation(w)})
        .in(q)
        .in(k)
        .in(v)
        .in(grad)
        .in(lse)
        .in(delta)
        .out(call.out(0))
        .i(g.l)
        .i(g.s)
        .i(g.e)
        .i(g.ev)
        .i(i * kSlice)
        .i(w)
        .f(g.scale)
        .i(g.causal)
        .f(g.p)
        .i(g.key)
        .f(g.keep)
        .i(blocks(g.l))
        .shared(6240)
        .group(256)
        .groups(g.bh * blocks(g.l));
  }
}

}  // namespace

void add_attention_ops(PortableOps& ops) {
  ops.add(OpId::scaled_dot_product_attention, attention);
  ops.add(OpId::scaled_dot_product_attention_backward, attention_backward);
}

}  // namespace tessera::common
