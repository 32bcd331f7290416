// layer_norm and batch_norm, forward and backward.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// Rows of layer_norm: [rows, cols], cols the normalised dimensions.
struct Rows {
  std::int64_t rows = 1, cols = 1;
};
Rows rows_of(const Shape& s, int axis) {
  Rows r;
  for (int i = 0; i < axis; ++i) r.rows *= s[i];
  for (int i = axis; i < s.rank(); ++i) r.cols *= s[i];
  return r;
}

void layer_norm_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<LayerNormAttrs>();
  const Rows r = rows_of(call.in(0).shape(), at.axis);
  const float* x = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  const float* b = in_ptr(call, 2);
  float* y = out_ptr(call, 0);
  float* mean = out_ptr(call, 1);
  float* rstd = out_ptr(call, 2);
  ctx.pool.parallel_for(r.rows, row_grain(r.cols), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      const float* xr = x + i * r.cols;
      // One pass: sum and sum of squares in double (no cancellation worth the name at f32 input).
      double s = 0, s2 = 0;
      for (std::int64_t j = 0; j < r.cols; ++j) {
        s += xr[j];
        s2 += static_cast<double>(xr[j]) * xr[j];
      }
      const double m = s / static_cast<double>(r.cols);
      const double v = std::max(s2 / static_cast<double>(r.cols) - m * m, 0.0);
      const auto mf = static_cast<float>(m);
      const auto rs = static_cast<float>(1.0 / std::sqrt(v + static_cast<double>(at.eps)));
      mean[i] = mf;
      rstd[i] = rs;
      float* yr = y + i * r.cols;
      for (std::int64_t j = 0; j < r.cols; ++j) yr[j] = (xr[j] - mf) * rs * w[j] + b[j];
    }
  });
}

// Rows per block of the column sums: a fixed count, so the order of additions (and the bits of
// grad_weight and grad_bias) does not depend on the thread count.
constexpr std::int64_t kRowBlock = 64;

void layer_norm_backward_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<LayerNormAttrs>();
  const Rows r = rows_of(call.in(1).shape(), at.axis);
  const float* g = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  const float* w = in_ptr(call, 2);
  const float* mean = in_ptr(call, 3);
  const float* rstd = in_ptr(call, 4);
  float* gx = out_ptr(call, 0);
  float* gw = out_ptr(call, 1);
  float* gb = out_ptr(call, 2);
  const std::int64_t blocks = (r.rows + kRowBlock - 1) / kRowBlock;
  std::vector<double> part(
      static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1) * 2 * r.cols));
  ctx.pool.parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      double* pw = part.data() + blk * 2 * r.cols;
      double* pb = pw + r.cols;
      for (std::int64_t i = blk * kRowBlock; i < std::min(r.rows, (blk + 1) * kRowBlock); ++i) {
        const float *gr = g + i * r.cols, *xr = x + i * r.cols;
        const double m = mean[i], rs = rstd[i];
        double a = 0, c = 0;  // sum(g w), sum(g w xhat)
        for (std::int64_t j = 0; j < r.cols; ++j) {
          const double xh = (xr[j] - m) * rs, gwj = static_cast<double>(gr[j]) * w[j];
          a += gwj;
          c += gwj * xh;
          pw[j] += gr[j] * xh;
          pb[j] += gr[j];
        }
        const double inv_n = 1.0 / static_cast<double>(r.cols);
        float* out = gx + i * r.cols;
        for (std::int64_t j = 0; j < r.cols; ++j) {
          const double xh = (xr[j] - m) * rs;
          out[j] = static_cast<float>(
              rs * (static_cast<double>(gr[j]) * w[j] - a * inv_n - xh * c * inv_n));
        }
      }
    }
  });
  for (std::int64_t j = 0; j < r.cols; ++j) {
    double sw = 0, sb = 0;
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      sw += part[static_cast<std::size_t>(blk * 2 * r.cols + j)];
      sb += part[static_cast<std::size_t>(blk * 2 * r.cols + r.cols + j)];
    }
    gw[j] = static_cast<float>(sw);
    gb[j] = static_cast<float>(sb);
  }
}

// x [N, C, S] (S the product of the dimensions after C).
struct Nchw {
  std::int64_t n, c, s;
};
Nchw nchw_of(const Shape& sh) {
  Nchw r{sh[0], sh[1], 1};
  for (int i = 2; i < sh.rank(); ++i) r.s *= sh[i];
  return r;
}

// Sums of f(value at (n, c, s), index) over one channel, in double, in a fixed order.
template <typename F>
double channel_sum(const Nchw& d, std::int64_t c, F f) {
  double acc = 0;
  for (std::int64_t n = 0; n < d.n; ++n) {
    const std::int64_t base = (n * d.c + c) * d.s;
    for (std::int64_t k = 0; k < d.s; ++k) acc += f(base + k);
  }
  return acc;
}

void batch_norm_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<BatchNormAttrs>();
  const Nchw d = nchw_of(call.in(0).shape());
  const float* x = in_ptr(call, 0);
  const float* w = in_ptr(call, 1);
  const float* b = in_ptr(call, 2);
  float* y = out_ptr(call, 0);
  float* save_mean = out_ptr(call, 1);
  float* save_invstd = out_ptr(call, 2);
  float* run_mean = out_ptr(call, 3);
  float* run_var = out_ptr(call, 4);
  const double count = static_cast<double>(d.n * d.s);
  ctx.pool.parallel_for(d.c, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      double m, invstd;
      if (at.training) {
        m = channel_sum(d, c, [&](std::int64_t i) { return static_cast<double>(x[i]); }) / count;
        const double m2 = channel_sum(d, c, [&](std::int64_t i) {
          const double dv = x[i] - m;
          return dv * dv;
        });
        invstd = 1.0 / std::sqrt(m2 / count + static_cast<double>(at.eps));
        const double mom = at.momentum;
        run_mean[c] = static_cast<float>((1 - mom) * run_mean[c] + mom * m);
        run_var[c] = static_cast<float>((1 - mom) * run_var[c] + mom * m2 / (count - 1));
      } else {
        m = run_mean[c];
        invstd = 1.0 / std::sqrt(static_cast<double>(run_var[c]) + static_cast<double>(at.eps));
      }
      save_mean[c] = static_cast<float>(m);
      save_invstd[c] = static_cast<float>(invstd);
      const double scale = invstd * w[c], shift = b[c] - m * scale;
      for (std::int64_t n = 0; n < d.n; ++n) {
        const std::int64_t base = (n * d.c + c) * d.s;
        for (std::int64_t k = 0; k < d.s; ++k)
          y[base + k] = static_cast<float>(x[base + k] * scale + shift);
      }
    }
  });
}

void batch_norm_backward_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<BatchNormAttrs>();
  const Nchw d = nchw_of(call.in(1).shape());
  const float* g = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  const float* w = in_ptr(call, 2);
  const float* mean = in_ptr(call, 3);
  const float* invstd = in_ptr(call, 4);
  float* gx = out_ptr(call, 0);
  float* gw = out_ptr(call, 1);
  float* gb = out_ptr(call, 2);
  const double count = static_cast<double>(d.n * d.s);
  ctx.pool.parallel_for(d.c, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const double m = mean[c], is = invstd[c];
      const double sg =
          channel_sum(d, c, [&](std::int64_t i) { return static_cast<double>(g[i]); });
      const double sgx = channel_sum(d, c, [&](std::int64_t i) { return g[i] * (x[i] - m) * is; });
      gw[c] = static_cast<float>(sgx);
      gb[c] = static_cast<float>(sg);
      const double k = is * w[c];
      for (std::int64_t n = 0; n < d.n; ++n) {
        const std::int64_t base = (n * d.c + c) * d.s;
        for (std::int64_t j = 0; j < d.s; ++j) {
          const std::int64_t i = base + j;
          gx[i] = at.training
                      ? static_cast<float>(k * (g[i] - sg / count - (x[i] - m) * is * sgx / count))
                      : static_cast<float>(k * g[i]);
        }
      }
    }
  });
}

}  // namespace

void register_norms(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, f32_only);
  };
  set(OpId::layer_norm, layer_norm_kernel);
  set(OpId::layer_norm_backward, layer_norm_backward_kernel);
  set(OpId::batch_norm, batch_norm_kernel);
  set(OpId::batch_norm_backward, batch_norm_backward_kernel);
}

}  // namespace tessera::cpu
