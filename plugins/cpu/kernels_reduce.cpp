// Reductions along one axis (min, var, std, prod), their backwards, and the softmax backwards.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// A contiguous tensor reduced along |axis| is [outer, n, inner].
struct Lines {
  std::int64_t outer = 1, n = 1, inner = 1;
};

Lines lines_of(const Shape& s, int axis) {
  Lines r;
  for (int i = 0; i < axis; ++i) r.outer *= s[i];
  r.n = s[axis];
  for (int i = axis + 1; i < s.rank(); ++i) r.inner *= s[i];
  return r;
}

// Calls f(offset of the line's first element, line index) for every (outer, inner) pair, in
// parallel; the line's elements are offset + k * inner.
template <typename F>
void each_line(Context& ctx, const Lines& ln, F f) {
  ctx.pool.parallel_for(ln.outer * ln.inner, row_grain(ln.n), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t l = b; l < e; ++l) f((l / ln.inner) * ln.n * ln.inner + l % ln.inner, l);
  });
}

void min_kernel(const OpCall& call, Context& ctx) {
  const Lines ln = lines_of(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t l) {
    float m = x[o];
    for (std::int64_t k = 1; k < ln.n; ++k) m = std::fmin(m, x[o + k * ln.inner]);
    y[l] = m;
  });
}

void min_backward_kernel(const OpCall& call, Context& ctx) {
  const Lines ln = lines_of(call.in(1).shape(), call.attr<AxisAttrs>().axis);
  const float* g = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t l) {
    std::int64_t best = 0;
    for (std::int64_t k = 1; k < ln.n; ++k)
      if (x[o + k * ln.inner] < x[o + best * ln.inner]) best = k;
    for (std::int64_t k = 0; k < ln.n; ++k) y[o + k * ln.inner] = k == best ? g[l] : 0.0f;
  });
}

template <bool kStd>
void var_kernel(const OpCall& call, Context& ctx) {
  const VarAttrs& at = call.attr<VarAttrs>();
  const Lines ln = lines_of(call.in(0).shape(), at.axis);
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  const double div = std::max(static_cast<double>(ln.n) - at.correction, 0.0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t l) {
    double s = 0;
    for (std::int64_t k = 0; k < ln.n; ++k) s += x[o + k * ln.inner];
    const double mean = s / static_cast<double>(ln.n);
    double m2 = 0;
    for (std::int64_t k = 0; k < ln.n; ++k) {
      const double d = x[o + k * ln.inner] - mean;
      m2 += d * d;
    }
    const double v = ln.n == 0 ? std::nan("") : m2 / div;
    y[l] = static_cast<float>(kStd ? std::sqrt(v) : v);
  });
}

void prod_kernel(const OpCall& call, Context& ctx) {
  const Lines ln = lines_of(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t l) {
    double p = 1;
    for (std::int64_t k = 0; k < ln.n; ++k) p *= x[o + k * ln.inner];
    y[l] = static_cast<float>(p);
  });
}

// grad_x[k] = grad * prod_{j != k} x[j], from prefix and suffix products (no division, so zeros
// in the line are exact).
void prod_backward_kernel(const OpCall& call, Context& ctx) {
  const Lines ln = lines_of(call.in(1).shape(), call.attr<AxisAttrs>().axis);
  const float* g = in_ptr(call, 0);
  const float* x = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t l) {
    double prefix = 1;
    for (std::int64_t k = 0; k < ln.n; ++k) {  // y holds the prefix products for now
      y[o + k * ln.inner] = static_cast<float>(prefix);
      prefix *= x[o + k * ln.inner];
    }
    double suffix = 1;
    for (std::int64_t k = ln.n - 1; k >= 0; --k) {
      y[o + k * ln.inner] = static_cast<float>(g[l] * y[o + k * ln.inner] * suffix);
      suffix *= x[o + k * ln.inner];
    }
  });
}

template <bool kLog>
void softmax_backward_kernel(const OpCall& call, Context& ctx) {
  const Lines ln = lines_of(call.in(1).shape(), call.attr<AxisAttrs>().axis);
  const float* g = in_ptr(call, 0);
  const float* y = in_ptr(call, 1);
  float* out = out_ptr(call, 0);
  each_line(ctx, ln, [&](std::int64_t o, std::int64_t) {
    double s = 0;
    for (std::int64_t k = 0; k < ln.n; ++k) {
      const std::int64_t i = o + k * ln.inner;
      s += kLog ? static_cast<double>(g[i]) : static_cast<double>(g[i]) * y[i];
    }
    const auto sf = static_cast<float>(s);
    for (std::int64_t k = 0; k < ln.n; ++k) {
      const std::int64_t i = o + k * ln.inner;
      out[i] = kLog ? g[i] - std::exp(y[i]) * sf : y[i] * (g[i] - sf);
    }
  });
}

}  // namespace

void register_reduce(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, f32_only);
  };
  set(OpId::min, min_kernel);
  set(OpId::min_backward, min_backward_kernel);
  set(OpId::var, var_kernel<false>);
  set(OpId::std, var_kernel<true>);
  set(OpId::prod, prod_kernel);
  set(OpId::prod_backward, prod_backward_kernel);
  set(OpId::softmax_backward, softmax_backward_kernel<false>);
  set(OpId::log_softmax_backward, softmax_backward_kernel<true>);
}

}  // namespace tessera::cpu
