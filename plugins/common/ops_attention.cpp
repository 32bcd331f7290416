// Launch geometry of scaled dot-product attention: the forward is one fused kernel per
// (batch*head, block of query rows); the backward is delta = rowsum(grad_out * out), then one
// kernel per (batch*head, block of keys) for dk and dv and one per (batch*head, block of query
// rows) for dq, each recomputing the probabilities from lse (no [L, S] tensor, no atomics).
// Two sets of kernels:
// - kernels/flash_*.tk, register-tiled (8 x 4 outputs per invocation, shared memory read 4
//   floats at a time), for head dims up to 64 that are multiples of 4 with every tensor at an
//   offset that is a multiple of 4 (GPT-style heads), on the devices whose traits allow it
//   (GpuTraits::tiled_attention: Vulkan, OpenCL GPUs); tiled_block chooses the block and buffers;
// - kernels/attention_*.tk for every other shape: blocks of 64, 4 x 4 outputs per invocation,
//   at most 128 output columns per kernel (wider heads take one launch per 128 columns).
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

// The tiling of the register-tiled kernels for these tensors on this device (|bk| 0 where they
// take the general kernels): blocks of 64 before 32, and at each, three shared buffers of bk x 64
// floats (q's rows stay for the whole block: 48 KiB, NVIDIA's Vulkan) before two (q's rows read
// again from cache for each tile: 32 KiB, lavapipe). On the H100 the third buffer is the faster
// (forward + backward at 8 x 8 heads x 512 tokens x 64, causal: 0.81-0.82 ms with three,
// 0.85 ms with two).
struct Tiling {
  std::int32_t bk = 0;
  std::int32_t buffers = 2;
  // The kernels' V1: 1 where q's rows keep the third buffer.
  std::int32_t resident_q() const { return buffers == 3 ? 1 : 0; }
};

Tiling tiled_block(const Attn& g, std::initializer_list<const Tensor*> tensors, Launcher& l) {
  if (g.e > 64 || g.ev > 64 || g.e % 4 != 0 || g.ev % 4 != 0 || g.e == 0 || g.ev == 0) return {};
  for (const Tensor* t : tensors)
    if (t->offset() % 4 != 0) return {};
  const GpuTraits& traits = l.traits();
  if (!traits.tiled_attention) return {};
  for (const std::int32_t bk : {64, 32})
    for (const std::int32_t buffers : {3, 2}) {
      const std::int64_t bytes = std::int64_t{buffers} * bk * 64 * 4;
      if (bytes <= traits.max_shared_bytes && bk * bk / 32 <= traits.max_group_size)
        return {bk, buffers};
    }
  return {};
}

// The parameters P(0)..P(10), shared memory and work-group size of the three register-tiled
// kernels, |blocks| blocks per batch*head.
Launch& tiled(Launch& launch, const Attn& g, Tiling t, std::int64_t blocks) {
  return launch.i(g.l)
      .i(g.s)
      .i(g.e)
      .i(g.ev)
      .f(g.scale)
      .i(g.causal)
      .f(g.p)
      .i(g.key)
      .f(g.keep)
      .i(blocks)
      .i(g.bh)
      .shared(t.buffers * t.bk * 64)
      .group(t.bk * t.bk / 32);
}

std::int64_t blocks_of(std::int64_t n, std::int32_t bk) {
  return (n + bk - 1) / bk;
}

void attention(const OpCall& call, Launcher& l) {
  const Attn g = attn(call, call.in(0), call.in(1), call.in(2));
  if (const Tiling t = tiled_block(g, {&call.in(0), &call.in(1), &call.in(2), &call.out(0)}, l);
      t.bk != 0) {
    const std::int64_t nb = blocks_of(g.l, t.bk);
    Launch launch(l, "flash_fwd", {t.bk, t.resident_q()});
    launch.in(call.in(0)).in(call.in(1)).in(call.in(2)).out(call.out(0)).out(call.out(1));
    tiled(launch, g, t, nb).groups(g.bh * nb);
    return;
  }
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
  if (const Tiling t =
          tiled_block(g, {&grad, &q, &k, &v, &call.out(0), &call.out(1), &call.out(2)}, l);
      t.bk != 0) {
    const std::int64_t nk = blocks_of(g.s, t.bk), nq = blocks_of(g.l, t.bk);
    Launch kv(l, "flash_bwd_kv", {t.bk, t.resident_q()});
    kv.in(q).in(k).in(v).in(grad).in(lse).in(delta).out(call.out(1)).out(call.out(2));
    tiled(kv, g, t, nk).groups(g.bh * nk);
    Launch dq(l, "flash_bwd_q", {t.bk, t.resident_q()});
    dq.in(q).in(k).in(v).in(grad).in(lse).in(delta).out(call.out(0));
    tiled(dq, g, t, nq).groups(g.bh * nq);
    return;
  }
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
