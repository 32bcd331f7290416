// GEMM (oneDNN or OpenBLAS, blas.h), conv2d as im2col + GEMM, and max pooling.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/geometry.h"
#include "kernels.h"
#include "tessera/half.h"

namespace tessera::cpu {

void gemm_serial(const Blas& blas, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  blas.sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

namespace {
// Below this many multiply-adds a GEMM runs on one thread: cutting it costs more than it saves.
constexpr std::int64_t kGemmSplitMacs = 1 << 18;
}  // namespace

namespace {

// Cuts C over the pool (by columns where it is wider, else by rows) and calls
// serial(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc) per block; A and B of element type T.
template <typename T, typename Serial>
void split_gemm(Context& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                const T* a, std::int64_t lda, const T* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc, Serial serial) {
  const std::int64_t span = std::max(m, n);
  const int parts = static_cast<int>(std::min<std::int64_t>(ctx.pool.size(), span / 16));
  if (parts < 2 || m * n * k < kGemmSplitMacs || ctx.pool.in_worker()) {
    serial(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const std::int64_t block = ((span + parts - 1) / parts + 15) & ~std::int64_t{15};
  ctx.pool.run_parts(parts, [&](int p, int) {
    const std::int64_t lo = std::min(span, p * block), len = std::min(span - lo, block);
    if (len <= 0) return;
    if (n >= m)  // columns [lo, lo + len) of C: columns of op(B)
      serial(ta, tb, m, len, k, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
    else  // rows [lo, lo + len) of C: rows of op(A)
      serial(ta, tb, len, n, k, ta ? a + lo : a + lo * lda, lda, b, ldb, beta, c + lo * ldc, ldc);
  });
}

}  // namespace

void gemm(Context& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  split_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc,
             [&](auto... args) { gemm_serial(ctx.blas, args...); });
}

void gemm_half(Context& ctx, DType t, bool ta, bool tb, std::int64_t m, std::int64_t n,
               std::int64_t k, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
               std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (t == DType::bf16 && ctx.blas.has_gemm_bf16() && k > 0) {
    split_gemm(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc,
               [&](auto... args) { ctx.blas.gemm_bf16(args...); });
    return;
  }
  // Widened to f32 whole (A is [m, k] or [k, m] with rows lda apart, B likewise).
  const std::int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
  const std::vector<float> wa = widen(ctx, t, a, a_rows * lda), wb = widen(ctx, t, b, b_rows * ldb);
  gemm(ctx, ta, tb, m, n, k, wa.data(), lda, wb.data(), ldb, beta, c, ldc);
}

std::vector<float> widen(Context& ctx, DType t, const std::uint16_t* v, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  ctx.pool.parallel_for(n, kElementGrain, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t i = s; i < e; ++i)
      out[i] = t == DType::bf16 ? bf16_to_f32(v[i]) : f16_to_f32(v[i]);
  });
  return out;
}

void narrow(Context& ctx, DType t, const float* v, std::uint16_t* out, std::int64_t n) {
  ctx.pool.parallel_for(n, kElementGrain, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t i = s; i < e; ++i)
      out[i] = t == DType::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  });
}

namespace {

// out = op(in0) op(in1) + beta * out, for a matmul or addmm call.
void gemm_of(const OpCall& call, Context& ctx, float beta) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1);
  const std::int64_t m = call.out(0).dim(0), n = call.out(0).dim(1);
  const std::int64_t k = at.trans_a ? a.dim(0) : a.dim(1);
  gemm(ctx, at.trans_a, at.trans_b, m, n, k, in_ptr(call, 0), a.dim(1), in_ptr(call, 1), b.dim(1),
       beta, out_ptr(call, 0), n);
}

// Each of the m rows of out [m, n] set to |row| (addmm's accumulators starting as its bias).
void fill_rows(Context& ctx, const float* row, std::int64_t m, std::int64_t n, float* out) {
  ctx.pool.parallel_for(m, row_grain(n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) std::copy_n(row, n, out + r * n);
  });
}

// matmul and addmm of f16 or bf16: f32 accumulators (addmm's start as the bias, in the result's
// dtype), rounded once, or with out_dtype f32 the result itself.
void gemm_half_of(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1), &y = call.out(0);
  const DType t = a.dtype();
  const std::int64_t m = y.dim(0), n = y.dim(1), k = at.trans_a ? a.dim(0) : a.dim(1);
  const bool wide = y.dtype() == DType::f32;
  std::vector<float> scratch(wide ? 0 : static_cast<std::size_t>(m * n));
  float* acc = wide ? out_ptr(call, 0) : scratch.data();
  const bool bias = call.op == OpId::addmm;
  if (bias && wide) fill_rows(ctx, in_ptr(call, 2), m, n, acc);
  if (bias && !wide)
    fill_rows(ctx, widen(ctx, t, in_ptr<std::uint16_t>(call, 2), n).data(), m, n, acc);
  gemm_half(ctx, t, at.trans_a, at.trans_b, m, n, k, in_ptr<std::uint16_t>(call, 0), a.dim(1),
            in_ptr<std::uint16_t>(call, 1), b.dim(1), bias ? 1.0f : 0.0f, acc, n);
  if (!wide) narrow(ctx, t, acc, out_ptr<std::uint16_t>(call, 0), m * n);
}

void matmul_kernel(const OpCall& call, Context& ctx) {
  if (call.in(0).dtype() != DType::f32) return gemm_half_of(call, ctx);
  gemm_of(call, ctx, 0.0f);
}

// C = op(A) op(B) + bias: C's rows start as the bias and the GEMM accumulates onto them (beta 1),
// which saves the library's pass zeroing C (beta 0) and a separate pass adding the bias.
void addmm_kernel(const OpCall& call, Context& ctx) {
  if (call.in(0).dtype() != DType::f32) return gemm_half_of(call, ctx);
  fill_rows(ctx, in_ptr(call, 2), call.out(0).dim(0), call.out(0).dim(1), out_ptr(call, 0));
  gemm_of(call, ctx, 1.0f);
}

// The geometry of one conv2d, conv2d_backward_input or conv2d_backward_weight call, in 64 bits
// (common::Conv is the GPU plugins' 32-bit launch form of the same).
// With groups, input channels [gi*c/groups, (gi+1)*c/groups) feed output channels
// [gi*o/groups, (gi+1)*o/groups): one GEMM per group over its rows of the im2col matrix.
struct Conv {
  std::int64_t n, c, h, w, o, kh, kw, ho, wo;
  int sh, sw, ph, pw, dh, dw, groups;
  std::int64_t rows() const { return c * kh * kw; }  // im2col rows (every group's)
  std::int64_t plane() const { return ho * wo; }     // output pixels per sample
  std::int64_t in_size() const { return c * h * w; }
  std::int64_t out_size() const { return o * plane(); }
  std::int64_t group_rows() const { return rows() / groups; }  // a group's rows: a weight row
  std::int64_t group_out() const { return o / groups; }        // output channels per group
};

Conv geometry(const OpCall& call) {
  const common::ConvShapes s = common::conv_shapes(call);
  const Conv2dAttrs& a = call.attr<Conv2dAttrs>();
  return {s.x[0], s.x[1],     s.x[2],     s.x[3],  s.w[0],  s.w[2],       s.w[3],       s.y[2],
          s.y[3], a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dilation_h, a.dilation_w, a.groups};
}

// Columns [lo, hi) of output row |oh|'s input row for kernel column |j| lie inside the image;
// the rest read padding. Stride 1 only.
struct Run {
  std::int64_t lo, hi;
};
Run inside(const Conv& g, std::int64_t j) {
  const std::int64_t lo = std::clamp<std::int64_t>(g.pw - j * g.dw, 0, g.wo);
  return {lo, std::clamp<std::int64_t>(g.w + g.pw - j * g.dw, lo, g.wo)};
}

// col[(c,i,j), p] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] for one sample (zero in the
// padding).
void im2col(const Conv& g, const float* x, float* col) {
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        float* dst = col + ((c * g.kh + i) * g.kw + j) * g.plane();
        const Run run = inside(g, j);
        for (std::int64_t oh = 0; oh < g.ho; ++oh) {
          const std::int64_t ih = oh * g.sh - g.ph + i * g.dh;
          float* row = dst + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill_n(row, g.wo, 0.0f);
            continue;
          }
          const float* src = x + (c * g.h + ih) * g.w;
          if (g.sw == 1) {  // one contiguous run between the padding
            std::fill(row, row + run.lo, 0.0f);
            std::copy(src + run.lo - g.pw + j * g.dw, src + run.hi - g.pw + j * g.dw, row + run.lo);
            std::fill(row + run.hi, row + g.wo, 0.0f);
            continue;
          }
          for (std::int64_t ow = 0; ow < g.wo; ++ow) {
            const std::int64_t iw = ow * g.sw - g.pw + j * g.dw;
            row[ow] = (iw >= 0 && iw < g.w) ? src[iw] : 0.0f;
          }
        }
      }
}

// dx[c, ...] = sum of col entries reading it (the adjoint of im2col), for one sample.
void col2im(const Conv& g, const float* col, float* dx) {
  std::fill_n(dx, g.in_size(), 0.0f);
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const float* src = col + ((c * g.kh + i) * g.kw + j) * g.plane();
        const Run run = inside(g, j);
        for (std::int64_t oh = 0; oh < g.ho; ++oh) {
          const std::int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          float* drow = dx + (c * g.h + ih) * g.w;
          const float* row = src + oh * g.wo;
          if (g.sw == 1) {
            float* d = drow - g.pw + j * g.dw;
            for (std::int64_t ow = run.lo; ow < run.hi; ++ow) d[ow] += row[ow];
            continue;
          }
          for (std::int64_t ow = 0; ow < g.wo; ++ow) {
            const std::int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw >= 0 && iw < g.w) drow[iw] += row[ow];
          }
        }
      }
}

// Convolutions run one sample at a time, samples spread over the pool: a sample's im2col matrix
// (288 x 121 floats for the CNN's second layer) stays in the core's cache between being written
// and being read by the GEMM, and the GEMM writes the sample's [O, HO*WO] output, which is
// already NCHW. A batch-wide im2col would stream tens of MB through memory and need a layout
// pass. With fewer samples than threads, each sample's GEMM is split over the pool instead.

void conv2d_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call);
  const float* x = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  ctx.pool.parallel_for(g.n, 1, [&](std::int64_t s, std::int64_t e) {
    ScratchBuffers::Lease col_buffer(ctx.scratch, g.rows() * g.plane());
    float* col = col_buffer.data();
    for (std::int64_t b = s; b < e; ++b) {
      im2col(g, x + b * g.in_size(), col);
      for (int gi = 0; gi < g.groups; ++gi)
        gemm(ctx, false, false, g.group_out(), g.plane(), g.group_rows(),
             w + gi * g.group_out() * g.group_rows(), g.group_rows(),
             col + gi * g.group_rows() * g.plane(), g.plane(), 0.0f,
             y + b * g.out_size() + gi * g.group_out() * g.plane(), g.plane());
    }
  });
}

void conv2d_backward_input_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call);
  const float* gy = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  float* dx = out_ptr(call, 0);
  ctx.pool.parallel_for(g.n, 1, [&](std::int64_t s, std::int64_t e) {
    ScratchBuffers::Lease col_buffer(ctx.scratch, g.rows() * g.plane());
    float* col = col_buffer.data();
    for (std::int64_t b = s; b < e; ++b) {
      for (int gi = 0; gi < g.groups; ++gi)
        gemm(ctx, true, false, g.group_rows(), g.plane(), g.group_out(),
             w + gi * g.group_out() * g.group_rows(), g.group_rows(),
             gy + b * g.out_size() + gi * g.group_out() * g.plane(), g.plane(), 0.0f,
             col + gi * g.group_rows() * g.plane(), g.plane());
      col2im(g, col, dx + b * g.in_size());
    }
  });
}

// dw = sum over samples of gy_b [O, P] col_b^T [P, CKK] (per group): each thread accumulates its
// share of the samples into its own [O, CKK] (the first into dw itself), then the shares are added.
void conv2d_backward_weight_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call);
  const float* gy = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  float* dw = out_ptr(call, 0);
  const std::int64_t size = g.o * g.group_rows();
  const int parts = static_cast<int>(std::clamp<std::int64_t>(g.n, 1, ctx.pool.size()));
  std::vector<float> shares(static_cast<std::size_t>((parts - 1) * size));
  ctx.pool.run_parts(parts, [&](int p, int count) {
    float* acc = p == 0 ? dw : shares.data() + (p - 1) * size;
    const std::int64_t lo = g.n * p / count, hi = g.n * (p + 1) / count;
    if (lo == hi) std::fill_n(acc, size, 0.0f);
    ScratchBuffers::Lease col_buffer(ctx.scratch, g.rows() * g.plane());
    float* col = col_buffer.data();
    for (std::int64_t b = lo; b < hi; ++b) {
      im2col(g, x + b * g.in_size(), col);
      for (int gi = 0; gi < g.groups; ++gi)
        gemm(ctx, false, true, g.group_out(), g.group_rows(), g.plane(),
             gy + b * g.out_size() + gi * g.group_out() * g.plane(), g.plane(),
             col + gi * g.group_rows() * g.plane(), g.plane(), b == lo ? 0.0f : 1.0f,
             acc + gi * g.group_out() * g.group_rows(), g.group_rows());
    }
  });
  for (int p = 1; p < parts; ++p) {
    const float* share = shares.data() + (p - 1) * size;
    for (std::int64_t i = 0; i < size; ++i) dw[i] += share[i];
  }
}

void max_pool2d_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<Pool2dAttrs>();
  const Shape& xs = call.in(0).shape();
  const Shape& ys = call.out(0).shape();
  const std::int64_t h = xs[2], w = xs[3], ho = ys[2], wo = ys[3];
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  auto* idx = out_ptr<std::int32_t>(call, 1);
  const bool two_by_two = a.kernel_h == 2 && a.kernel_w == 2 && a.stride_h == 2 && a.stride_w == 2;
  ctx.pool.parallel_for(xs[0] * xs[1], 4, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      const float* src = x + p * h * w;
      if (two_by_two) {  // the common case, branch-free so that it vectorises (same first max)
        for (std::int64_t oh = 0; oh < ho; ++oh) {
          float* yr = y + (p * ho + oh) * wo;
          std::int32_t* ir = idx + (p * ho + oh) * wo;
          const float* r0 = src + 2 * oh * w;
          const float* r1 = r0 + w;
          const auto top = static_cast<std::int32_t>(2 * oh * w),
                     below = static_cast<std::int32_t>(w);
          for (std::int64_t ow = 0; ow < wo; ++ow) {
            const float v00 = r0[2 * ow], v01 = r0[2 * ow + 1], v10 = r1[2 * ow],
                        v11 = r1[2 * ow + 1];
            const auto left = top + 2 * static_cast<std::int32_t>(ow);
            float best = v00;
            std::int32_t where = left;
            where = v01 > best ? left + 1 : where;
            best = v01 > best ? v01 : best;
            where = v10 > best ? left + below : where;
            best = v10 > best ? v10 : best;
            where = v11 > best ? left + below + 1 : where;
            best = v11 > best ? v11 : best;
            yr[ow] = best;
            ir[ow] = where;
          }
        }
        continue;
      }
      for (std::int64_t oh = 0; oh < ho; ++oh)
        for (std::int64_t ow = 0; ow < wo; ++ow) {
          std::int64_t best = oh * a.stride_h * w + ow * a.stride_w;
          for (std::int64_t i = 0; i < a.kernel_h; ++i)
            for (std::int64_t j = 0; j < a.kernel_w; ++j) {
              const std::int64_t at = (oh * a.stride_h + i) * w + ow * a.stride_w + j;
              if (src[at] > src[best]) best = at;
            }
          y[(p * ho + oh) * wo + ow] = src[best];
          idx[(p * ho + oh) * wo + ow] = static_cast<std::int32_t>(best);
        }
    }
  });
}

void max_pool2d_backward_kernel(const OpCall& call, Context& ctx) {
  const Shape& gs = call.in(0).shape();
  const Shape& xs = call.out(0).shape();
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = gs[2] * gs[3];
  const float* gy = in_ptr(call, 0);
  const auto* idx = in_ptr<std::int32_t>(call, 1);
  float* dx = out_ptr(call, 0);
  ctx.pool.parallel_for(xs[0] * xs[1], 4, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      float* d = dx + p * plane_in;
      std::fill_n(d, plane_in, 0.0f);
      for (std::int64_t k = 0; k < plane_out; ++k) {
        const std::int32_t at = idx[p * plane_out + k];
        if (at >= 0 && at < plane_in) d[at] += gy[p * plane_out + k];  // ignore corrupt indices
      }
    }
  });
}

// OpenBLAS takes int dimensions (and the same limit is kept with oneDNN, so that the supported
// calls do not depend on which library loaded).
Support blas_dims(const OpCall& call) {
  for (int i = 0; i < call.num_inputs; ++i)
    for (std::int64_t d : call.in(i).shape())
      if (d > std::numeric_limits<int>::max())
        return Support::no("a dimension exceeds the GEMM library's 32-bit limit");
  return Support::yes();
}

Support blas_sized(const OpCall& call) {
  if (Support s = blas_dims(call); !s) return s;
  return f32_only(call);
}

// matmul and addmm: blas_sized, in f32, f16 or bf16 (inputs, bias and output of one dtype, or
// 16-bit inputs with an f32 result and bias: out_dtype).
Support gemm_supports(const OpCall& call) {
  const DType t = call.in(0).dtype();
  return is_16bit_float(t) ? blas_dims(call) : blas_sized(call);
}

}  // namespace

void register_nn(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, blas_sized);
  };
  t[static_cast<std::size_t>(OpId::matmul)] =
      std::make_unique<CpuKernel>(ctx, matmul_kernel, gemm_supports);
  t[static_cast<std::size_t>(OpId::addmm)] =
      std::make_unique<CpuKernel>(ctx, addmm_kernel, gemm_supports);
  set(OpId::conv2d, conv2d_kernel);
  set(OpId::conv2d_backward_input, conv2d_backward_input_kernel);
  set(OpId::conv2d_backward_weight, conv2d_backward_weight_kernel);
  set(OpId::max_pool2d, max_pool2d_kernel);
  set(OpId::max_pool2d_backward, max_pool2d_backward_kernel);
}

}  // namespace tessera::cpu
