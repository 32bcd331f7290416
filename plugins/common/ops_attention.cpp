// Launch geometry of scaled dot-product attention: the forward is one fused kernel per
// (batch*head, block of query rows); the backward is delta = rowsum(grad_out * out), then one
// kernel per (batch*head, block of keys) for dk and dv and one per (batch*head, block of query
// rows) for dq (no atomics). Two sets of kernels:
// - kernels/flash_*.tk, register-tiled (8 x 4 outputs per invocation, shared memory read 4
//   floats at a time), for head dims up to 64 that are multiples of 4 with every tensor at an
//   offset that is a multiple of 4 (GPT-style heads), on the devices whose traits allow it
//   (GpuTraits::tiled_attention: Vulkan, OpenCL GPUs); tiled_block chooses the block and buffers.
//   The dk/dv kernel also stores each tile of dS it computes in a scratch tensor, and dq = dS k
//   reads them back (flash_bwd_dq: one product a tile instead of three and the exponentials):
//   heads in groups whose tiles fit kScratchBytes (TESSERA_ATTENTION_SCRATCH_MIB), or, where one
//   head's do not, dq recomputing P and dP from lse (flash_bwd_q);
// - kernels/attention_*.tk for every other shape: blocks of 64, 4 x 4 outputs per invocation,
//   at most 128 output columns per kernel (wider heads take one launch per 128 columns), each
//   backward kernel recomputing the probabilities from lse.
// f16 and bf16 tensors run on the Vulkan plugin's matrix units (its shaders/attention_coopmat.comp:
// the same three kernels with 16-bit products and f32 sums, blocks of 64, head dims up to 64 that
// are multiples of 8) where the device has them (GpuTraits::coop_attention_*); elsewhere the
// op's support says no and the dispatcher widens the call to f32 (op_computes_in_f32).
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include <tessera/errors.h>

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

// The heads of one launch of the register-tiled kernels: [first, first + count).
struct Heads {
  std::int64_t first, count;
};

// The parameters P(0)..P(12) of the register-tiled and the matrix-unit kernels: |nq| query and
// |nk| key blocks per batch*head, heads |h|.
Launch& block_words(Launch& launch, const Attn& g, std::int64_t nq, std::int64_t nk, Heads h) {
  return launch.i(g.l)
      .i(g.s)
      .i(g.e)
      .i(g.ev)
      .f(g.scale)
      .i(g.causal)
      .f(g.p)
      .i(g.key)
      .f(g.keep)
      .i(nq)
      .i(nk)
      .i(h.count)
      .i(h.first);
}

// The register-tiled kernels' parameters, shared memory and work-group size.
Launch& tiled(Launch& launch, const Attn& g, Tiling t, std::int64_t nq, std::int64_t nk, Heads h) {
  return block_words(launch, g, nq, nk, h).shared(t.buffers * t.bk * 64).group(t.bk * t.bk / 32);
}

std::int64_t blocks_of(std::int64_t n, std::int32_t bk) {
  return (n + bk - 1) / bk;
}

// The bytes the backward's dS tiles may take (heads are done in groups that fit):
// TESSERA_ATTENTION_SCRATCH_MIB, 256 MiB unset; 0 has dq recompute P and dP instead. At most
// 4096 MiB, so that the kernels index the tiles' floats with 32-bit integers.
std::int64_t scratch_bytes() {
  static const std::int64_t bytes = []() -> std::int64_t {
    const char* env = std::getenv("TESSERA_ATTENTION_SCRATCH_MIB");
    if (!env || !*env) return std::int64_t{256} << 20;
    const std::string_view s(env);
    std::int64_t mib = -1;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), mib);
    if (ec != std::errc() || end != s.data() + s.size() || mib < 0 || mib > 4096)
      throw ConfigError(fmt::format(
          "TESSERA_ATTENTION_SCRATCH_MIB='{}' is not a number of MiB from 0 to 4096 (the "
          "memory the attention backward may use for its dS tiles; 0: none); unset it for 256",
          s));
    return mib << 20;
  }();
  return bytes;
}

// delta = rowsum(grad_out * out) per query row (kernels/attention_delta.tk): [rows], or with
// |with_lse| [rows, 2] of (lse, delta).
Tensor row_terms(Launcher& l, const Attn& g, const Tensor& grad, const Tensor& out,
                 const Tensor& lse, bool with_lse) {
  const std::int64_t rows = g.bh * g.l;
  const Tensor t = with_lse ? Tensor::empty({rows, 2}, DType::f32, &l.device())
                            : Tensor::empty({rows}, DType::f32, &l.device());
  const DType dt = grad.dtype();
  const bool four = dt == DType::f32 && multiples_of_4({g.ev, grad.offset(), out.offset()});
  Launch(l, "attention_delta", {with_lse ? 1 : 0, float_code(dt), four ? 1 : 0})
      .in(grad)
      .in(out)
      .in(lse)
      .out(t)
      .i(rows)
      .i(g.ev)
      .run(rows);
  return t;
}

// ----- f16 and bf16 on matrix units (the Vulkan plugin's shaders/attention_coopmat.comp) -----

// The kernel's V0: which kernel, then its flags.
constexpr std::int32_t kCoopForward = 0, kCoopKeys = 1, kCoopQueries = 2;
constexpr std::int32_t kCoopBf16 = 4;    // the 16-bit type is bf16 (its rounding)
constexpr std::int32_t kCoopWide = 8;    // out, grad_out and the gradients f32 (out_dtype f32)
constexpr std::int64_t kCoopBlock = 64;  // rows of a work-group, keys of a tile
constexpr std::int64_t kCoopSharedBytes = 2272 * 16;  // the kernel's shared array
constexpr std::int64_t kCoopTileBytes = 64 * 64 * 2;  // one 16-bit dS tile

// Heads per launch of the backward so that their dS tiles fit scratch_bytes(); 0 where one
// head's do not (the call then is not taken: widened to f32).
std::int64_t coop_heads_per_group(const Attn& g) {
  const std::int64_t nq = blocks_of(g.l, kCoopBlock), nk = blocks_of(g.s, kCoopBlock);
  const std::int64_t limit = scratch_bytes();
  const std::int64_t row_bytes = nk <= limit / kCoopTileBytes ? nk * kCoopTileBytes : 0;
  const std::int64_t head_bytes = row_bytes != 0 && nq <= limit / row_bytes ? nq * row_bytes : 0;
  return head_bytes != 0 ? std::min(g.bh, limit / head_bytes) : 0;
}

// Whether the matrix-unit kernels take this call: q, k, v in f16 or bf16 where the device runs
// them, head dims up to 64 that are multiples of 8, every 16-bit tensor's offset a multiple of 8
// elements and every f32 one's of 4 (16-byte loads and stores), the shared array within the
// device's limit, and for the backward, one head's dS tiles within the scratch limit.
bool coop_takes(const OpCall& call, const GpuTraits& traits) {
  const bool forward = call.op == OpId::scaled_dot_product_attention;
  const Tensor& q = call.in(forward ? 0 : 1);
  if (!(q.dtype() == DType::f16    ? traits.coop_attention_f16
        : q.dtype() == DType::bf16 ? traits.coop_attention_bf16
                                   : false))
    return false;
  const Attn g = forward ? attn(call, call.in(0), call.in(1), call.in(2))
                         : attn(call, call.in(1), call.in(2), call.in(3));
  if (g.e == 0 || g.ev == 0 || g.e > 64 || g.ev > 64 || g.e % 8 != 0 || g.ev % 8 != 0 ||
      traits.max_shared_bytes < kCoopSharedBytes)
    return false;
  auto aligned = [](const Tensor& t) {
    return t.offset() % (is_16bit_float(t.dtype()) ? 8 : 4) == 0;
  };
  for (int i = 0; i < call.num_inputs; ++i)
    if (!aligned(call.in(i))) return false;
  for (int i = 0; i < call.num_outputs; ++i)
    if (!aligned(call.out(i))) return false;
  return forward || coop_heads_per_group(g) > 0;
}

// The matrix-unit kernels' parameters (block_words) and work-group size (four subgroups).
Launch& coop_words(Launch& launch, const Attn& g, std::int64_t nq, std::int64_t nk, Heads h) {
  return block_words(launch, g, nq, nk, h).group(128);
}

std::string_view coop_kernel(DType t) {
  return t == DType::bf16 ? "attention_coopmat_bf16" : "attention_coopmat";
}

std::int32_t coop_flags(DType in, DType out) {
  return (in == DType::bf16 ? kCoopBf16 : 0) | (out == DType::f32 ? kCoopWide : 0);
}

void coop_attention(const OpCall& call, Launcher& l) {
  const Tensor &q = call.in(0), &out = call.out(0);
  const Attn g = attn(call, q, call.in(1), call.in(2));
  const std::int64_t nq = blocks_of(g.l, kCoopBlock), nk = blocks_of(g.s, kCoopBlock);
  Launch launch(l, coop_kernel(q.dtype()), {kCoopForward | coop_flags(q.dtype(), out.dtype())});
  launch.label("attention_coopmat forward")
      .in(q)
      .in(call.in(1))
      .in(call.in(2))
      .out(out)
      .out(call.out(1));
  coop_words(launch, g, nq, nk, {0, g.bh}).groups(g.bh * nq);
}

void coop_attention_backward(const OpCall& call, Launcher& l) {
  const Tensor &grad = call.in(0), &q = call.in(1), &k = call.in(2), &v = call.in(3);
  const Attn g = attn(call, q, k, v);
  const Tensor stats = row_terms(l, g, grad, call.in(4), call.in(5), true);
  const std::int64_t nq = blocks_of(g.l, kCoopBlock), nk = blocks_of(g.s, kCoopBlock);
  const std::int64_t per = coop_heads_per_group(g);  // > 0: coop_takes
  const Tensor tiles =
      Tensor::empty({per * nq * nk * kCoopBlock * kCoopBlock}, q.dtype(), &l.device());
  const std::int32_t flags = coop_flags(q.dtype(), grad.dtype());
  for (std::int64_t h0 = 0; h0 < g.bh; h0 += per) {
    const Heads h{h0, std::min(per, g.bh - h0)};
    Launch kv(l, coop_kernel(q.dtype()), {kCoopKeys | flags});
    kv.label("attention_coopmat backward dk dv")
        .in(q)
        .in(k)
        .in(v)
        .in(grad)
        .in(stats)
        .out(call.out(1))
        .out(call.out(2))
        .out(tiles);
    coop_words(kv, g, nq, nk, h).groups(h.count * nk);
    Launch dq(l, coop_kernel(q.dtype()), {kCoopQueries | flags});
    dq.label("attention_coopmat backward dq").in(k).in(tiles).out(call.out(0));
    coop_words(dq, g, nq, nk, h).groups(h.count * nq);
  }
}

// f32 calls as gpu_supports says; f16 and bf16 ones where the matrix units take them (else the
// dispatcher runs them widened to f32).
Support attention_supports(const OpCall& call, const GpuTraits& traits) {
  const Tensor& q = call.in(call.op == OpId::scaled_dot_product_attention ? 0 : 1);
  if (!is_16bit_float(q.dtype())) return gpu_supports(call);
  if (coop_takes(call, traits)) return gpu_supports_of(call, true);
  return Support::no(
      "f16 and bf16 attention runs on the Vulkan plugin's matrix units, for head dims up to 64 "
      "that are multiples of 8; elsewhere in f32");
}

void attention(const OpCall& call, Launcher& l) {
  if (is_16bit_float(call.in(0).dtype())) return coop_attention(call, l);
  const Attn g = attn(call, call.in(0), call.in(1), call.in(2));
  if (const Tiling t = tiled_block(g, {&call.in(0), &call.in(1), &call.in(2), &call.out(0)}, l);
      t.bk != 0) {
    const std::int64_t nb = blocks_of(g.l, t.bk);
    Launch launch(l, "flash_fwd", {t.bk, t.resident_q()});
    launch.in(call.in(0)).in(call.in(1)).in(call.in(2)).out(call.out(0)).out(call.out(1));
    tiled(launch, g, t, nb, blocks_of(g.s, t.bk), {0, g.bh}).groups(g.bh * nb);
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
  if (is_16bit_float(q.dtype())) return coop_attention_backward(call, l);
  const Attn g = attn(call, q, k, v);
  if (const Tiling t =
          tiled_block(g, {&grad, &q, &k, &v, &call.out(0), &call.out(1), &call.out(2)}, l);
      t.bk != 0) {
    // [lse, delta] per query row: one binding for both, so that the dk/dv kernel keeps one for
    // the dS tiles.
    const Tensor stats = row_terms(l, g, grad, out, lse, true);
    const std::int64_t nk = blocks_of(g.s, t.bk), nq = blocks_of(g.l, t.bk);
    // Heads per group: one head's tiles are nq * nk * bk * bk floats (divided, not multiplied,
    // against the limit: no overflow at any size).
    const std::int64_t limit = scratch_bytes(), tile_bytes = std::int64_t{t.bk} * t.bk * 4;
    const std::int64_t row_bytes = nk <= limit / tile_bytes ? nk * tile_bytes : 0;
    const std::int64_t head_bytes = row_bytes != 0 && nq <= limit / row_bytes ? nq * row_bytes : 0;
    const std::int64_t per = head_bytes != 0 ? std::min(g.bh, limit / head_bytes) : 0;
    // Heads in groups of |per| whose dS tiles the dk/dv kernel keeps for dq (V2 = 1); where one
    // head's do not fit (per 0), all heads at once, dq recomputing P and dP (binding 7 is then
    // not accessed: dk is bound there again).
    const bool keep = per > 0;
    const Tensor tiles =
        keep ? Tensor::empty({per * head_bytes / 4}, DType::f32, &l.device()) : call.out(1);
    const std::int64_t group = keep ? per : g.bh;
    for (std::int64_t h0 = 0; h0 < g.bh; h0 += group) {
      const Heads h{h0, std::min(group, g.bh - h0)};
      Launch kv(l, "flash_bwd_kv", {t.bk, t.resident_q(), keep ? 1 : 0});
      kv.in(q).in(k).in(v).in(grad).in(stats).out(call.out(1)).out(call.out(2)).out(tiles);
      tiled(kv, g, t, nq, nk, h).groups(h.count * nk);
      if (keep) {
        Launch dq(l, "flash_bwd_dq", {t.bk});
        dq.in(k).in(tiles).out(call.out(0));
        tiled(dq, g, t, nq, nk, h).groups(h.count * nq);
      } else {
        Launch dq(l, "flash_bwd_q", {t.bk, t.resident_q()});
        dq.in(q).in(k).in(v).in(grad).in(stats).out(call.out(0));
        tiled(dq, g, t, nq, nk, h).groups(h.count * nq);
      }
    }
    return;
  }
  const Tensor delta = row_terms(l, g, grad, out, lse, false);
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

void check_attention_environment() {
  (void)scratch_bytes();
}

void add_attention_ops(PortableOps& ops) {
  ops.add(OpId::scaled_dot_product_attention, attention, attention_supports);
  ops.add(OpId::scaled_dot_product_attention_backward, attention_backward, attention_supports);
}

}  // namespace tessera::common
