// Reductions along one axis, softmax and log_softmax (cross-entropy: kernels_losses.cpp).
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// A contiguous tensor reduced along |axis| is [outer, n, inner].
struct Split {
  std::int64_t outer = 1, n = 1, inner = 1;
};

Split split(const Shape& s, int axis) {
  Split r;
  for (int i = 0; i < axis; ++i) r.outer *= s[i];
  r.n = s[axis];
  for (int i = axis + 1; i < s.rank(); ++i) r.inner *= s[i];
  return r;
}

// Calls f(x_row_start, stride, out_index) for every (outer, inner) pair of input |input|, in
// parallel.
template <typename F>
void for_each_line(const OpCall& call, Context& ctx, const Split& sp, F f, int input = 0) {
  const float* x = in_ptr(call, input);
  const std::int64_t lines = sp.outer * sp.inner;
  ctx.pool.parallel_for(lines, row_grain(sp.n), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t l = b; l < e; ++l) {
      const std::int64_t o = l / sp.inner, i = l % sp.inner;
      f(x + o * sp.n * sp.inner + i, sp.inner, l);
    }
  });
}

// x[0] + x[stride] + ... + x[(n-1) stride] in double. Unit-stride lines keep eight partial sums
// (a fixed order, so the result does not depend on the machine) that the compiler vectorises.
double sum_line(const float* x, std::int64_t stride, std::int64_t n) {
  if (stride != 1) {
    double acc = 0;
    for (std::int64_t k = 0; k < n; ++k) acc += x[k * stride];
    return acc;
  }
  double part[8] = {};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) part[j] += x[k + j];
  double acc = 0;
  for (; k < n; ++k) acc += x[k];
  for (int j = 0; j < 8; ++j) acc += part[j];
  return acc;
}

template <bool kMean>
void sum_kernel(const OpCall& call, Context& ctx) {
  const Split sp = split(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  float* y = out_ptr(call, 0);
  const double scale = kMean ? 1.0 / static_cast<double>(sp.n) : 1.0;
  if (sp.inner >= 16) {
    // Whole rows at a time: x[o, k, :] is contiguous, so the loop over k adds unit-stride rows
    // (vectorised) instead of walking each line with a stride of |inner|.
    const float* x = in_ptr(call, 0);
    const std::int64_t chunks = (sp.inner + 255) / 256;
    ctx.pool.parallel_for(sp.outer * chunks, std::max<std::int64_t>(1, row_grain(sp.n * 256)),
                          [&](std::int64_t b, std::int64_t e) {
                            double acc[256];
                            for (std::int64_t t = b; t < e; ++t) {
                              const std::int64_t o = t / chunks, i0 = (t % chunks) * 256;
                              const std::int64_t len = std::min<std::int64_t>(256, sp.inner - i0);
                              std::fill_n(acc, len, 0.0);
                              for (std::int64_t k = 0; k < sp.n; ++k) {
                                const float* row = x + (o * sp.n + k) * sp.inner + i0;
                                for (std::int64_t i = 0; i < len; ++i) acc[i] += row[i];
                              }
                              float* out = y + o * sp.inner + i0;
                              for (std::int64_t i = 0; i < len; ++i)
                                out[i] = static_cast<float>(acc[i] * scale);
                            }
                          });
    return;
  }
  for_each_line(call, ctx, sp, [&](const float* x, std::int64_t stride, std::int64_t out) {
    y[out] = static_cast<float>(sum_line(x, stride, sp.n) * scale);
  });
}

void max_kernel(const OpCall& call, Context& ctx) {
  const Split sp = split(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  float* y = out_ptr(call, 0);
  for_each_line(call, ctx, sp, [&](const float* x, std::int64_t stride, std::int64_t out) {
    float m = x[0];
    for (std::int64_t k = 1; k < sp.n; ++k) m = std::fmax(m, x[k * stride]);
    y[out] = m;
  });
}

// The index of the first maximum of x[0], x[stride], ..., x[(n-1) stride].
std::int64_t first_max(const float* x, std::int64_t stride, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t k = 1; k < n; ++k)
    if (x[k * stride] > x[best * stride]) best = k;
  return best;
}

void argmax_kernel(const OpCall& call, Context& ctx) {
  const Split sp = split(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  auto* y = out_ptr<std::int32_t>(call, 0);
  for_each_line(call, ctx, sp, [&](const float* x, std::int64_t stride, std::int64_t out) {
    y[out] = static_cast<std::int32_t>(first_max(x, stride, sp.n));
  });
}

// The gradient of line l goes to its first maximum (argmax's choice), zeros elsewhere.
void max_backward_kernel(const OpCall& call, Context& ctx) {
  const Split sp = split(call.in(1).shape(), call.attr<AxisAttrs>().axis);
  const float* g = in_ptr(call, 0);
  const float* base = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  for_each_line(
      call, ctx, sp,
      [&](const float* x, std::int64_t stride, std::int64_t line) {
        float* o = y + (x - base);
        const std::int64_t best = first_max(x, stride, sp.n);
        for (std::int64_t k = 0; k < sp.n; ++k) o[k * stride] = k == best ? g[line] : 0.0f;
      },
      1);
}

template <bool kLog>
void softmax_kernel(const OpCall& call, Context& ctx) {
  const Split sp = split(call.in(0).shape(), call.attr<AxisAttrs>().axis);
  const float* base = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  for_each_line(call, ctx, sp, [&](const float* x, std::int64_t stride, std::int64_t) {
    float* o = y + (x - base);
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t k = 0; k < sp.n; ++k) m = std::fmax(m, x[k * stride]);
    double total = 0;
    for (std::int64_t k = 0; k < sp.n; ++k)
      total += std::exp(static_cast<double>(x[k * stride] - m));
    if (kLog) {
      const float lse = m + static_cast<float>(std::log(total));
      for (std::int64_t k = 0; k < sp.n; ++k) o[k * stride] = x[k * stride] - lse;
    } else {
      const double inv = 1.0 / total;
      for (std::int64_t k = 0; k < sp.n; ++k)
        o[k * stride] = static_cast<float>(std::exp(static_cast<double>(x[k * stride] - m)) * inv);
    }
  });
}

}  // namespace

void register_reductions(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, f32_only);
  };
  set(OpId::sum, sum_kernel<false>);
  set(OpId::mean, sum_kernel<true>);
  set(OpId::max, max_kernel);
  set(OpId::argmax, argmax_kernel);
  set(OpId::max_backward, max_backward_kernel);
  set(OpId::softmax, softmax_kernel<false>);
  set(OpId::log_softmax, softmax_kernel<true>);
}

}  // namespace tessera::cpu
