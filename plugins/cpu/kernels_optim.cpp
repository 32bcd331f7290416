// Optimizer updates, one pass over each parameter.
#include <cmath>

#include "kernels.h"

namespace tessera::cpu {
namespace {

void sgd_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<SgdAttrs>();
  const float* g = in_ptr(call, 0);
  float* p = out_ptr(call, 0);
  float* v = out_ptr(call, 1);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      float d = g[i] + a.weight_decay * p[i];
      if (a.momentum != 0) {
        v[i] = a.first_step ? d : a.momentum * v[i] + (1 - a.dampening) * d;
        d = a.nesterov ? d + a.momentum * v[i] : v[i];
      }
      p[i] -= a.lr * d;
    }
  });
}

void adam_kernel(const OpCall& call, Context& ctx) {
  const auto& a = call.attr<AdamAttrs>();
  const float* g = in_ptr(call, 0);
  float* p = out_ptr(call, 0);
  float* m = out_ptr(call, 1);
  float* v = out_ptr(call, 2);
  const auto step = static_cast<double>(a.step);
  const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta1), step));
  const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta2), step));
  const float step_size = a.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const float d = g[i] + a.weight_decay * p[i];
      m[i] = a.beta1 * m[i] + (1 - a.beta1) * d;
      v[i] = a.beta2 * v[i] + (1 - a.beta2) * d * d;
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + a.eps);
    }
  });
}

}  // namespace

void register_optim(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::sgd_update)] =
      std::make_unique<CpuKernel>(ctx, sgd_kernel, f32_only);
  t[static_cast<std::size_t>(OpId::adam_update)] =
      std::make_unique<CpuKernel>(ctx, adam_kernel, f32_only);
}

}  // namespace tessera::cpu
