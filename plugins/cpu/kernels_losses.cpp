// Losses (cross_entropy with ignore_index and label smoothing, mse_loss), the sum of squares
// behind gradient clipping, and AdamW's update.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels.h"

namespace tessera::cpu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Label |r| of an i32 or i64 label tensor.
std::int64_t label_at(const OpCall& call, std::int64_t r) {
  return call.in(1).dtype() == DType::i64 ? in_ptr<std::int64_t>(call, 1)[r]
                                          : in_ptr<std::int32_t>(call, 1)[r];
}

// log(sum(exp(row))) computed stably.
double log_sum_exp(const float* row, std::int64_t c) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t k = 0; k < c; ++k) m = std::fmax(m, row[k]);
  double total = 0;
  for (std::int64_t k = 0; k < c; ++k) total += std::exp(static_cast<double>(row[k] - m));
  return m + std::log(total);
}

// The number of targets that count (labels other than ignore_index).
std::int64_t counted(const OpCall& call, std::int64_t rows) {
  const std::int64_t ignore = call.attr<CrossEntropyAttrs>().ignore_index;
  std::int64_t m = 0;
  for (std::int64_t r = 0; r < rows; ++r) m += label_at(call, r) != ignore;
  return m;
}

void cross_entropy_kernel(const OpCall& call, Context&) {
  const auto& at = call.attr<CrossEntropyAttrs>();
  const float* x = in_ptr(call, 0);
  const std::int64_t c = call.in(0).dim(-1), rows = call.in(1).numel();
  const double s = at.label_smoothing;
  double loss = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t label = label_at(call, r);
    if (label == at.ignore_index) continue;
    if (label < 0 || label >= c) {
      loss = kNaN;
      break;
    }
    const float* row = x + r * c;
    const double lse = log_sum_exp(row, c);
    double term = (1 - s) * (lse - row[label]);
    if (s > 0) {
      double all = 0;
      for (std::int64_t k = 0; k < c; ++k) all += lse - row[k];
      term += s / static_cast<double>(c) * all;
    }
    loss += term;
  }
  *out_ptr(call, 0) = static_cast<float>(loss / static_cast<double>(counted(call, rows)));
}

void cross_entropy_backward_kernel(const OpCall& call, Context& ctx) {
  const auto& at = call.attr<CrossEntropyAttrs>();
  const float* x = in_ptr(call, 0);
  const std::int64_t c = call.in(0).dim(-1), rows = call.in(1).numel();
  const double scale =
      static_cast<double>(*in_ptr(call, 2)) / static_cast<double>(counted(call, rows));
  const double s = at.label_smoothing, off = s / static_cast<double>(c);
  float* g = out_ptr(call, 0);
  ctx.pool.parallel_for(rows, row_grain(c), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const float* row = x + r * c;
      float* out = g + r * c;
      const std::int64_t label = label_at(call, r);
      if (label == at.ignore_index) {
        std::fill_n(out, c, 0.0f);
        continue;
      }
      const bool valid = label >= 0 && label < c;
      const double lse = log_sum_exp(row, c);
      for (std::int64_t k = 0; k < c; ++k) {
        const double p = std::exp(static_cast<double>(row[k]) - lse);
        out[k] = valid ? static_cast<float>((p - (k == label ? 1 - s : 0.0) - off) * scale)
                       : std::numeric_limits<float>::quiet_NaN();
      }
    }
  });
}

// Elements per block of the sums below: a fixed size, so that the order of additions does not
// depend on the thread count.
constexpr std::int64_t kSumBlock = 1 << 14;

// sum over i of f(i) for i in [0, n), in double, blocks in parallel and added in order.
template <typename F>
double blocked_sum(Context& ctx, std::int64_t n, F f) {
  const std::int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> part(static_cast<std::size_t>(blocks));
  ctx.pool.parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      double acc = 0;
      for (std::int64_t i = blk * kSumBlock; i < std::min(n, (blk + 1) * kSumBlock); ++i)
        acc += f(i);
      part[static_cast<std::size_t>(blk)] = acc;
    }
  });
  double total = 0;
  for (double p : part) total += p;
  return total;
}

void mse_loss_kernel(const OpCall& call, Context& ctx) {
  const float* a = in_ptr(call, 0);
  const float* b = in_ptr(call, 1);
  float* y = out_ptr(call, 0);
  const std::int64_t n = call.in(0).numel();
  const Reduction red = call.attr<LossAttrs>().reduction;
  if (red == Reduction::none) {
    ctx.pool.parallel_for(n, kElementGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) y[i] = (a[i] - b[i]) * (a[i] - b[i]);
    });
    return;
  }
  const double total = blocked_sum(ctx, n, [&](std::int64_t i) {
    const double d = static_cast<double>(a[i]) - b[i];
    return d * d;
  });
  *y = static_cast<float>(red == Reduction::mean ? total / static_cast<double>(n) : total);
}

void sum_squares_kernel(const OpCall& call, Context& ctx) {
  const float* x = in_ptr(call, 0);
  *out_ptr(call, 0) = static_cast<float>(blocked_sum(
      ctx, call.in(0).numel(), [&](std::int64_t i) { return static_cast<double>(x[i]) * x[i]; }));
}

struct AdamW {
  float decay, step_size, inv_bc2_sqrt, b1, b2, eps;
};

void adamw_range(const AdamW a, const float* __restrict g, float* __restrict p, float* __restrict m,
                 float* __restrict v, std::int64_t b, std::int64_t e) {
  const float decay = a.decay, step_size = a.step_size, inv_bc2_sqrt = a.inv_bc2_sqrt, b1 = a.b1,
              b2 = a.b2, eps = a.eps;
  for (std::int64_t i = b; i < e; ++i) {
    const float mi = b1 * m[i] + (1 - b1) * g[i];
    const float vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
  }
}

void adamw_kernel(const OpCall& call, Context& ctx) {
  const AdamAttrs& at = call.attr<AdamAttrs>();
  const auto step = static_cast<double>(at.step);
  const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(at.beta1), step));
  const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(at.beta2), step));
  const AdamW a{
      1 - at.lr * at.weight_decay, at.lr / bc1, 1 / std::sqrt(bc2), at.beta1, at.beta2, at.eps};
  const float* g = in_ptr(call, 0);
  float* p = out_ptr(call, 0);
  float* m = out_ptr(call, 1);
  float* v = out_ptr(call, 2);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain,
                        [&](std::int64_t b, std::int64_t e) { adamw_range(a, g, p, m, v, b, e); });
}

}  // namespace

void register_losses(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, f32_only);
  };
  set(OpId::cross_entropy, cross_entropy_kernel);
  set(OpId::cross_entropy_backward, cross_entropy_backward_kernel);
  set(OpId::mse_loss, mse_loss_kernel);
  set(OpId::sum_squares, sum_squares_kernel);
  set(OpId::adamw_update, adamw_kernel);
}

}  // namespace tessera::cpu
