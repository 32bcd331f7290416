// Average pooling (fixed windows and adaptive ones) and their backwards, one plane per task.
#include <algorithm>

#include "../common/pool.h"
#include "kernels.h"

namespace tessera::cpu {
namespace {

using common::AvgWindow;

// Calls f(window) for every output cell of a plane, rows then columns (common/pool.h).
template <typename F>
void each_window(const common::AvgPool& g, F f) {
  for (std::int64_t oh = 0; oh < g.ho; ++oh) {
    const AvgWindow r = g.rows(oh);
    for (std::int64_t ow = 0; ow < g.wo; ++ow) {
      const AvgWindow c = g.cols(ow);
      f(r, c, oh * g.wo + ow, g.divisor(r, c));
    }
  }
}

void avg_pool_kernel(const OpCall& call, Context& ctx) {
  const common::AvgPool g = common::avg_pool(call);
  const float* x = in_ptr(call, 0);
  float* y = out_ptr(call, 0);
  const std::int64_t in = g.h * g.w, out = g.ho * g.wo;
  ctx.pool.parallel_for(g.planes, row_grain(in), [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      const float* src = x + p * in;
      float* dst = y + p * out;
      each_window(g, [&](AvgWindow r, AvgWindow c, std::int64_t at, float divisor) {
        float sum = 0;
        for (std::int64_t i = r.begin; i < r.end; ++i)
          for (std::int64_t j = c.begin; j < c.end; ++j) sum += src[i * g.w + j];
        dst[at] = sum / divisor;
      });
    }
  });
}

void avg_pool_backward_kernel(const OpCall& call, Context& ctx) {
  const common::AvgPool g = common::avg_pool(call);
  const float* gy = in_ptr(call, 0);
  float* dx = out_ptr(call, 0);
  const std::int64_t in = g.h * g.w, out = g.ho * g.wo;
  ctx.pool.parallel_for(g.planes, row_grain(in), [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t p = s; p < e; ++p) {
      const float* src = gy + p * out;
      float* dst = dx + p * in;
      std::fill_n(dst, in, 0.0f);
      each_window(g, [&](AvgWindow r, AvgWindow c, std::int64_t at, float divisor) {
        const float share = src[at] / divisor;
        for (std::int64_t i = r.begin; i < r.end; ++i)
          for (std::int64_t j = c.begin; j < c.end; ++j) dst[i * g.w + j] += share;
      });
    }
  });
}

}  // namespace

void register_avg_pool(KernelTable& t, Context& ctx) {
  auto set = [&](OpId op, KernelFn fn) {
    t[static_cast<std::size_t>(op)] = std::make_unique<CpuKernel>(ctx, fn, f32_only);
  };
  set(OpId::avg_pool2d, avg_pool_kernel);
  set(OpId::avg_pool2d_backward, avg_pool_backward_kernel);
  set(OpId::adaptive_avg_pool2d, avg_pool_kernel);
  set(OpId::adaptive_avg_pool2d_backward, avg_pool_backward_kernel);
}

}  // namespace tessera::cpu
