// Scaled dot-product attention, blocked as flash attention on the CPU: each task owns a block of
// query rows (forward, dQ) or of keys (dK, dV) of one batch*head, and walks the other side in
// tiles through the GEMM library, keeping one tile of scores in scratch (never [L, S]). The
// forward's softmax is online (a running max and sum per row); the backward recomputes the
// probabilities from the saved log-sum-exp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kernels.h"

namespace tessera::cpu {
namespace {

constexpr std::int64_t kRows = 64;  // query rows per block
constexpr std::int64_t kCols = 64;  // keys per tile

// e^x for x <= 0 to a few ulp (round-to-nearest range reduction, a degree-6 polynomial), written
// so that the loops around it vectorise (std::exp does not without -ffast-math). Below -87 it
// returns about 2^-126 rather than 0: what it scales is then negligible.
inline float exp_neg(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// The shape of one call, as [BH, L, E] x [BH, S, E] x [BH, S, Ev].
struct Geom {
  std::int64_t bh, l, s, e, ev;
  float scale;
  bool causal;
  float p;            // dropout probability
  std::uint32_t key;  // dropout_key(seed)
  float keep;         // 1 / (1 - p)
  std::int64_t row_blocks() const { return (l + kRows - 1) / kRows; }
  std::int64_t col_blocks() const { return (s + kCols - 1) / kCols; }
  // Keys [0, end) that some row of [i0, i0 + rows) may see.
  std::int64_t key_end(std::int64_t i0, std::int64_t rows) const {
    return causal ? std::min(s, i0 + rows) : s;
  }
  // Keys of tile [j0, j0 + cols) that row i sees: [j0, j0 + visible).
  std::int64_t visible(std::int64_t i, std::int64_t j0, std::int64_t cols) const {
    return causal ? std::clamp<std::int64_t>(i - j0 + 1, 0, cols) : cols;
  }
  // The dropout factor of probability (b, i, j) (1 without dropout).
  float drop(std::int64_t b, std::int64_t i, std::int64_t j) const {
    const auto n = static_cast<std::uint32_t>((b * l + i) * s + j);
    const float u = static_cast<float>(dropout_hash(n ^ key) >> 8) * (1.0f / 16777216.0f);
    return u >= p ? keep : 0.0f;
  }
};

Geom geometry(const OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto& a = call.attr<AttentionAttrs>();
  Geom g{};
  g.l = q.dim(-2);
  g.e = q.dim(-1);
  g.s = k.dim(-2);
  g.ev = v.dim(-1);
  g.bh = 1;  // the leading dims (not numel / (L * E): L or E may be 0)
  for (int i = 0; i + 2 < q.rank(); ++i) g.bh *= q.dim(i);
  g.scale = attention_scale(a, g.e);
  g.causal = a.is_causal;
  g.p = a.dropout_p;
  g.key = dropout_key(a.seed);
  g.keep = 1.0f / (1.0f - a.dropout_p);
  return g;
}

// Row-major C[m,n] = op(A) op(B) + beta * C on the calling thread, any size.
void gemm(const Blas& blas, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0)
      for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  blas.sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// ----- forward -----

// Rows [i0, i0 + rows) of batch*head b: out and lse. |tile| holds kRows * kCols floats.
void forward_block(const Geom& g, const Blas& blas, const float* q, const float* k, const float* v,
                   float* out, float* lse, std::int64_t b, std::int64_t i0, std::int64_t rows,
                   float* tile) {
  const float* qb = q + (b * g.l + i0) * g.e;
  const float* kb = k + b * g.s * g.e;
  const float* vb = v + b * g.s * g.ev;
  float* ob = out + (b * g.l + i0) * g.ev;
  float mx[kRows], sum[kRows];
  std::fill_n(mx, rows, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, rows, 0.0f);
  std::fill_n(ob, rows * g.ev, 0.0f);
  const std::int64_t end = g.key_end(i0, rows);
  for (std::int64_t j0 = 0; j0 < end; j0 += kCols) {
    const std::int64_t cols = std::min(kCols, end - j0);
    gemm(blas, false, true, rows, cols, g.e, qb, g.e, kb + j0 * g.e, g.e, 0.0f, tile, cols);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* p = tile + r * cols;
      const std::int64_t n = g.visible(i0 + r, j0, cols);
      float m = mx[r];
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, p[j] * g.scale);
      if (n == 0 || m == -std::numeric_limits<float>::infinity()) {
        std::fill_n(p, cols, 0.0f);
        continue;
      }
      float s = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        p[j] = exp_neg(p[j] * g.scale - m);
        s += p[j];
      }
      std::fill(p + n, p + cols, 0.0f);
      const float alpha =
          mx[r] == -std::numeric_limits<float>::infinity() ? 0.0f : exp_neg(mx[r] - m);
      sum[r] = sum[r] * alpha + s;
      mx[r] = m;
      if (alpha != 1.0f)
        for (std::int64_t c = 0; c < g.ev; ++c) ob[r * g.ev + c] *= alpha;
      if (g.p > 0)
        for (std::int64_t j = 0; j < n; ++j) p[j] *= g.drop(b, i0 + r, j0 + j);
    }
    gemm(blas, false, false, rows, g.ev, cols, tile, cols, vb + j0 * g.ev, g.ev, 1.0f, ob, g.ev);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float inv = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;
    for (std::int64_t c = 0; c < g.ev; ++c) ob[r * g.ev + c] *= inv;
    lse[b * g.l + i0 + r] =
        sum[r] > 0 ? mx[r] + std::log(sum[r]) : -std::numeric_limits<float>::infinity();
  }
}

void attention_kernel(const OpCall& call, Context& ctx) {
  const Geom g = geometry(call, call.in(0), call.in(1), call.in(2));
  const float *q = in_ptr(call, 0), *k = in_ptr(call, 1), *v = in_ptr(call, 2);
  float *out = out_ptr(call, 0), *lse = out_ptr(call, 1);
  const std::int64_t blocks = g.row_blocks();
  ctx.pool.parallel_for(g.bh * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    ScratchBuffers::Lease tile(ctx.scratch, kRows * kCols);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / blocks, i0 = (t % blocks) * kRows;
      forward_block(g, ctx.blas, q, k, v, out, lse, b, i0, std::min(kRows, g.l - i0), tile.data());
    }
  });
}

// ----- backward -----

struct Backward {
  const Geom& g;
  const Blas& blas;
  const float *grad, *q, *k, *v, *lse, *delta;  // delta[b*L + i] = rowsum(grad * out)
  float *dq, *dk, *dv;                          // null: not accumulated by this pass

  // The tile (rows [i0, i0+rows), keys [j0, j0+cols)) of batch*head b: recomputes P, then adds
  // its part to dV (P after dropout, transposed, times grad), dK (dS^T q) and dQ (dS k), where
  // dS = P * (dP - delta) * scale and dP = grad v^T (after dropout). |scratch| holds
  // 3 * kRows * kCols floats.
  void tile(std::int64_t b, std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols,
            float* scratch) const {
    float* p = scratch;                   // probabilities
    float* ds = scratch + kRows * kCols;  // dP, then dS
    float* pd = ds + kRows * kCols;       // probabilities after dropout
    const float* qb = q + (b * g.l + i0) * g.e;
    const float* gb = grad + (b * g.l + i0) * g.ev;
    const float* kb = k + (b * g.s + j0) * g.e;
    const float* vb = v + (b * g.s + j0) * g.ev;
    gemm(blas, false, true, rows, cols, g.e, qb, g.e, kb, g.e, 0.0f, p, cols);
    gemm(blas, false, true, rows, cols, g.ev, gb, g.ev, vb, g.ev, 0.0f, ds, cols);
    const bool dropout = g.p > 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r, n = g.visible(i, j0, cols);
      const float m = lse[b * g.l + i], d = delta[b * g.l + i];
      float *pr = p + r * cols, *dr = ds + r * cols, *pdr = pd + r * cols;
      for (std::int64_t j = 0; j < n; ++j) pr[j] = exp_neg(pr[j] * g.scale - m);
      std::fill(pr + n, pr + cols, 0.0f);
      if (dropout) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const float z = j < n ? g.drop(b, i, j0 + j) : 0.0f;
          pdr[j] = pr[j] * z;
          dr[j] *= z;
        }
      }
      for (std::int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * (dr[j] - d) * g.scale;
    }
    const float* pv = dropout ? pd : p;
    if (dv)
      gemm(blas, true, false, cols, g.ev, rows, pv, cols, gb, g.ev, 1.0f,
           dv + (b * g.s + j0) * g.ev, g.ev);
    if (dk)
      gemm(blas, true, false, cols, g.e, rows, ds, cols, qb, g.e, 1.0f, dk + (b * g.s + j0) * g.e,
           g.e);
    if (dq)
      gemm(blas, false, false, rows, g.e, cols, ds, cols, kb, g.e, 1.0f, dq + (b * g.l + i0) * g.e,
           g.e);
  }
};

void attention_backward_kernel(const OpCall& call, Context& ctx) {
  const Geom g = geometry(call, call.in(1), call.in(2), call.in(3));
  const float *grad = in_ptr(call, 0), *out = in_ptr(call, 4);
  float *dq = out_ptr(call, 0), *dk = out_ptr(call, 1), *dv = out_ptr(call, 2);
  std::vector<float> delta(static_cast<std::size_t>(g.bh * g.l));
  ctx.pool.parallel_for(g.bh * g.l, row_grain(g.ev), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float s = 0;
      for (std::int64_t c = 0; c < g.ev; ++c) s += grad[r * g.ev + c] * out[r * g.ev + c];
      delta[static_cast<std::size_t>(r)] = s;
    }
  });
  const Backward base{g,
                      ctx.blas,
                      grad,
                      in_ptr(call, 1),
                      in_ptr(call, 2),
                      in_ptr(call, 3),
                      in_ptr(call, 5),
                      delta.data(),
                      dq,
                      dk,
                      dv};
  const std::int64_t rb = g.row_blocks(), cb = g.col_blocks();
  constexpr std::int64_t kScratch = 3 * kRows * kCols;
  if (g.bh >= ctx.pool.size()) {
    // One task per batch*head computes all three gradients: no probability is recomputed.
    ctx.pool.parallel_for(g.bh, 1, [&](std::int64_t b0, std::int64_t b1) {
      ScratchBuffers::Lease scratch(ctx.scratch, kScratch);
      for (std::int64_t b = b0; b < b1; ++b) {
        std::fill_n(dq + b * g.l * g.e, g.l * g.e, 0.0f);
        std::fill_n(dk + b * g.s * g.e, g.s * g.e, 0.0f);
        std::fill_n(dv + b * g.s * g.ev, g.s * g.ev, 0.0f);
        for (std::int64_t i0 = 0; i0 < g.l; i0 += kRows) {
          const std::int64_t rows = std::min(kRows, g.l - i0), end = g.key_end(i0, rows);
          for (std::int64_t j0 = 0; j0 < end; j0 += kCols)
            base.tile(b, i0, rows, j0, std::min(kCols, end - j0), scratch.data());
        }
      }
    });
    return;
  }
  // Fewer batch*heads than threads: dK and dV over blocks of keys, then dQ over blocks of rows,
  // each block owned by one task (the probabilities are computed twice; no atomics).
  Backward kv = base, qpass = base;
  kv.dq = nullptr;
  qpass.dk = qpass.dv = nullptr;
  ctx.pool.parallel_for(g.bh * cb, 1, [&](std::int64_t t0, std::int64_t t1) {
    ScratchBuffers::Lease scratch(ctx.scratch, kScratch);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / cb, j0 = (t % cb) * kCols, cols = std::min(kCols, g.s - j0);
      std::fill_n(dk + (b * g.s + j0) * g.e, cols * g.e, 0.0f);
      std::fill_n(dv + (b * g.s + j0) * g.ev, cols * g.ev, 0.0f);
      // With the causal mask, rows before j0 see none of these keys.
      for (std::int64_t i0 = g.causal ? j0 / kRows * kRows : 0; i0 < g.l; i0 += kRows)
        kv.tile(b, i0, std::min(kRows, g.l - i0), j0, cols, scratch.data());
    }
  });
  ctx.pool.parallel_for(g.bh * rb, 1, [&](std::int64_t t0, std::int64_t t1) {
    ScratchBuffers::Lease scratch(ctx.scratch, kScratch);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t b = t / rb, i0 = (t % rb) * kRows, rows = std::min(kRows, g.l - i0);
      std::fill_n(dq + (b * g.l + i0) * g.e, rows * g.e, 0.0f);
      const std::int64_t end = g.key_end(i0, rows);
      for (std::int64_t j0 = 0; j0 < end; j0 += kCols)
        qpass.tile(b, i0, rows, j0, std::min(kCols, end - j0), scratch.data());
    }
  });
}

// Every tensor f32 (the backward's grad_out may be f32 beside 16-bit inputs: out_dtype f32):
// f16 and bf16 calls run widened to f32 (op.h's op_computes_in_f32).
Support attention_supports(const OpCall& call) {
  for (int i = 0; i < call.num_inputs; ++i)
    if (call.in(i).dtype() != DType::f32)
      return Support::no(
          fmt::format("dtype {} is not supported (f32 only)", dtype_name(call.in(i).dtype())));
  return f32_only(call);
}

}  // namespace

void register_attention(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::scaled_dot_product_attention)] =
      std::make_unique<CpuKernel>(ctx, attention_kernel, attention_supports);
  t[static_cast<std::size_t>(OpId::scaled_dot_product_attention_backward)] =
      std::make_unique<CpuKernel>(ctx, attention_backward_kernel, attention_supports);
}

}  // namespace tessera::cpu
