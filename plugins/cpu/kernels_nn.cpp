// GEMM (OpenBLAS), conv2d as im2col + GEMM, and max pooling.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// Row-major C[m,n] = alpha * op(A) op(B) + beta * C, with A and B stored as given.
void gemm(const Blas& blas, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0)
      for (std::int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  blas.sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m),
             static_cast<int>(n), static_cast<int>(k), 1.0f, a,
             static_cast<int>(std::max<std::int64_t>(lda, 1)), b,
             static_cast<int>(std::max<std::int64_t>(ldb, 1)), beta, c,
             static_cast<int>(std::max<std::int64_t>(ldc, 1)));
}

void matmul_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<MatmulAttrs>();
  const Tensor &a = call.in(0), &b = call.in(1);
  const std::int64_t m = call.out(0).dim(0), n = call.out(0).dim(1);
  const std::int64_t k = at.trans_a ? a.dim(0) : a.dim(1);
  gemm(ctx.blas, at.trans_a, at.trans_b, m, n, k, in_ptr(call, 0), a.dim(1), in_ptr(call, 1),
       b.dim(1), 0.0f, out_ptr(call, 0), n);
}

// The geometry of one conv2d call.
struct Conv {
  std::int64_t n, c, h, w, o, kh, kw, ho, wo;
  int sh, sw, ph, pw;
  std::int64_t rows() const { return c * kh * kw; }  // im2col rows
  std::int64_t plane() const { return ho * wo; }     // output pixels per sample
  // Samples per chunk so that one im2col buffer stays within 64 MiB.
  std::int64_t chunk() const {
    const std::int64_t per_sample = rows() * plane() * 4;
    return std::clamp<std::int64_t>((64 << 20) / std::max<std::int64_t>(per_sample, 1), 1, n);
  }
};

Conv geometry(const Shape& x, const Shape& w, const Shape& y, const Conv2dAttrs& a) {
  return {x[0], x[1], x[2],       x[3],       w[0],    w[2],   w[3],
          y[2], y[3], a.stride_h, a.stride_w, a.pad_h, a.pad_w};
}

float* scratch(std::vector<float>& v, std::int64_t size) {
  if (static_cast<std::int64_t>(v.size()) < size) v.resize(static_cast<std::size_t>(size));
  return v.data();
}

// col[(c,kh,kw), b*P + p] = x[b0 + b, c, ...] for samples [b0, b0 + nb).
void im2col(const Conv& g, const float* x, std::int64_t b0, std::int64_t nb, float* col,
            ThreadPool& pool) {
  const std::int64_t ld = nb * g.plane();
  pool.parallel_for(nb * g.c, 1, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t bc = s; bc < e; ++bc) {
      const std::int64_t b = bc / g.c, c = bc % g.c;
      const float* src = x + ((b0 + b) * g.c + c) * g.h * g.w;
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          float* dst = col + ((c * g.kh + i) * g.kw + j) * ld + b * g.plane();
          for (std::int64_t oh = 0; oh < g.ho; ++oh) {
            const std::int64_t ih = oh * g.sh - g.ph + i;
            float* row = dst + oh * g.wo;
            if (ih < 0 || ih >= g.h) {
              std::fill_n(row, g.wo, 0.0f);
              continue;
            }
            const float* srow = src + ih * g.w;
            if (g.sw == 1) {  // one contiguous run between the padding
              const std::int64_t lo = std::clamp<std::int64_t>(g.pw - j, 0, g.wo);
              const std::int64_t hi = std::clamp<std::int64_t>(g.w + g.pw - j, lo, g.wo);
              std::fill(row, row + lo, 0.0f);
              std::memcpy(row + lo, srow + lo - g.pw + j,
                          static_cast<std::size_t>(hi - lo) * sizeof(float));
              std::fill(row + hi, row + g.wo, 0.0f);
              continue;
            }
            for (std::int64_t ow = 0; ow < g.wo; ++ow) {
              const std::int64_t iw = ow * g.sw - g.pw + j;
              row[ow] = (iw >= 0 && iw < g.w) ? srow[iw] : 0.0f;
            }
          }
        }
    }
  });
}

// dx[b0 + b, c, ...] += col[(c,kh,kw), b*P + p] (the adjoint of im2col); dx starts zeroed.
void col2im(const Conv& g, const float* col, std::int64_t b0, std::int64_t nb, float* dx,
            ThreadPool& pool) {
  const std::int64_t ld = nb * g.plane();
  pool.parallel_for(nb * g.c, 1, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t bc = s; bc < e; ++bc) {
      const std::int64_t b = bc / g.c, c = bc % g.c;
      float* dst = dx + ((b0 + b) * g.c + c) * g.h * g.w;
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          const float* src = col + ((c * g.kh + i) * g.kw + j) * ld + b * g.plane();
          for (std::int64_t oh = 0; oh < g.ho; ++oh) {
            const std::int64_t ih = oh * g.sh - g.ph + i;
            if (ih < 0 || ih >= g.h) continue;
            float* drow = dst + ih * g.w;
            const float* row = src + oh * g.wo;
            if (g.sw == 1) {
              const std::int64_t lo = std::clamp<std::int64_t>(g.pw - j, 0, g.wo);
              const std::int64_t hi = std::clamp<std::int64_t>(g.w + g.pw - j, lo, g.wo);
              float* d = drow + lo - g.pw + j;
              for (std::int64_t ow = lo; ow < hi; ++ow) d[ow - lo] += row[ow];
              continue;
            }
            for (std::int64_t ow = 0; ow < g.wo; ++ow) {
              const std::int64_t iw = ow * g.sw - g.pw + j;
              if (iw >= 0 && iw < g.w) drow[iw] += row[ow];
            }
          }
        }
    }
  });
}

// [nb, O, P] (samples b0..) <-> [O, nb*P]
void to_channel_major(const Conv& g, const float* y, std::int64_t b0, std::int64_t nb, float* t,
                      ThreadPool& pool) {
  pool.parallel_for(nb * g.o, 16, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t bo = s; bo < e; ++bo) {
      const std::int64_t b = bo / g.o, o = bo % g.o;
      std::memcpy(t + o * nb * g.plane() + b * g.plane(), y + ((b0 + b) * g.o + o) * g.plane(),
                  static_cast<std::size_t>(g.plane()) * sizeof(float));
    }
  });
}

void from_channel_major(const Conv& g, const float* t, std::int64_t b0, std::int64_t nb, float* y,
                        ThreadPool& pool) {
  pool.parallel_for(nb * g.o, 16, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t bo = s; bo < e; ++bo) {
      const std::int64_t b = bo / g.o, o = bo % g.o;
      std::memcpy(y + ((b0 + b) * g.o + o) * g.plane(), t + o * nb * g.plane() + b * g.plane(),
                  static_cast<std::size_t>(g.plane()) * sizeof(float));
    }
  });
}

thread_local std::vector<float> t_col, t_tmp;

void conv2d_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call.in(0).shape(), call.in(1).shape(), call.out(0).shape(),
                          call.attr<Conv2dAttrs>());
  const float* x = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  const std::int64_t chunk = g.chunk();
  for (std::int64_t b0 = 0; b0 < g.n; b0 += chunk) {
    const std::int64_t nb = std::min(chunk, g.n - b0);
    float* col = scratch(t_col, g.rows() * nb * g.plane());
    im2col(g, x, b0, nb, col, ctx.pool);
    if (nb == 1) {
      gemm(ctx.blas, false, false, g.o, g.plane(), g.rows(), w, g.rows(), col, g.plane(), 0.0f,
           y + b0 * g.o * g.plane(), g.plane());
      continue;
    }
    float* tmp = scratch(t_tmp, g.o * nb * g.plane());
    gemm(ctx.blas, false, false, g.o, nb * g.plane(), g.rows(), w, g.rows(), col, nb * g.plane(),
         0.0f, tmp, nb * g.plane());
    from_channel_major(g, tmp, b0, nb, y, ctx.pool);
  }
}

void conv2d_backward_input_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call.out(0).shape(), call.in(1).shape(), call.in(0).shape(),
                          call.attr<Conv2dAttrs>());
  const float* gy = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  float* dx = out_ptr(call, 0);
  std::fill_n(dx, call.out(0).numel(), 0.0f);
  const std::int64_t chunk = g.chunk();
  for (std::int64_t b0 = 0; b0 < g.n; b0 += chunk) {
    const std::int64_t nb = std::min(chunk, g.n - b0);
    const float* gt = gy + b0 * g.o * g.plane();
    if (nb > 1) {
      float* tmp = scratch(t_tmp, g.o * nb * g.plane());
      to_channel_major(g, gy, b0, nb, tmp, ctx.pool);
      gt = tmp;
    }
    float* col = scratch(t_col, g.rows() * nb * g.plane());
    gemm(ctx.blas, true, false, g.rows(), nb * g.plane(), g.o, w, g.rows(), gt, nb * g.plane(),
         0.0f, col, nb * g.plane());
    col2im(g, col, b0, nb, dx, ctx.pool);
  }
}

void conv2d_backward_weight_kernel(const OpCall& call, Context& ctx) {
  const Conv g = geometry(call.in(1).shape(), call.out(0).shape(), call.in(0).shape(),
                          call.attr<Conv2dAttrs>());
  const float* gy = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  float* dw = out_ptr(call, 0);
  const std::int64_t chunk = g.chunk();
  for (std::int64_t b0 = 0; b0 < g.n; b0 += chunk) {
    const std::int64_t nb = std::min(chunk, g.n - b0);
    float* col = scratch(t_col, g.rows() * nb * g.plane());
    im2col(g, x, b0, nb, col, ctx.pool);
    const float* gt = gy + b0 * g.o * g.plane();
    if (nb > 1) {
      float* tmp = scratch(t_tmp, g.o * nb * g.plane());
      to_channel_major(g, gy, b0, nb, tmp, ctx.pool);
      gt = tmp;
    }
    gemm(ctx.blas, false, true, g.o, g.rows(), nb * g.plane(), gt, nb * g.plane(), col,
         nb * g.plane(), b0 == 0 ? 0.0f : 1.0f, dw, g.rows());
  }
  if (g.n == 0) std::fill_n(dw, call.out(0).numel(), 0.0f);
}

void max_pool2d_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<Pool2dAttrs>();
  const Shape& xs = call.in(0).shape();
  const Shape& ys = call.out(0).shape();
  const std::int64_t h = xs[2], w = xs[3], ho = ys[2], wo = ys[3];
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  auto* idx = out_ptr<std::int32_t>(call, 1);
  ctx.pool.parallel_for(xs[0] * xs[1], 4, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      const float* src = x + p * h * w;
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

// OpenBLAS takes int dimensions.
Support blas_sized(const OpCall& call) {
  for (int i = 0; i < call.num_inputs; ++i)
    for (std::int64_t d : call.in(i).shape())
      if (d > std::numeric_limits<int>::max())
        return Support::no("a dimension exceeds OpenBLAS's 32-bit limit");
  return f32_only(call);
}

}  // namespace

void register_nn(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, blas_sized);
  };
  set(OpId::matmul, matmul_kernel);
  set(OpId::conv2d, conv2d_kernel);
  set(OpId::conv2d_backward_input, conv2d_backward_input_kernel);
  set(OpId::conv2d_backward_weight, conv2d_backward_weight_kernel);
  set(OpId::max_pool2d, max_pool2d_kernel);
  set(OpId::max_pool2d_backward, max_pool2d_backward_kernel);
}

}  // namespace tessera::cpu
