// Optimizer updates, one pass over each parameter.
#include <cmath>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// The attributes are copied into locals and each variant gets its own loop, so that the compiler
// vectorises it (a loop reading |a| through a reference can not assume the stores leave it alone).
void sgd_kernel(const OpCall& call, Context& ctx) {
  const SgdAttrs a = call.attr<SgdAttrs>();
  const float* __restrict g = in_ptr(call, 0);
  float* __restrict p = out_ptr(call, 0);
  float* __restrict v = out_ptr(call, 1);
  const float lr = a.lr, wd = a.weight_decay, mom = a.momentum, damp = 1 - a.dampening;
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [=](std::int64_t b, std::int64_t e) {
    if (mom == 0) {
      for (std::int64_t i = b; i < e; ++i) p[i] -= lr * (g[i] + wd * p[i]);
    } else if (a.first_step) {
      for (std::int64_t i = b; i < e; ++i) {
        const float d = g[i] + wd * p[i];
        v[i] = d;
        p[i] -= lr * (a.nesterov ? d + mom * d : d);
      }
    } else if (a.nesterov) {
      for (std::int64_t i = b; i < e; ++i) {
        const float d = g[i] + wd * p[i];
        const float vi = mom * v[i] + damp * d;
        v[i] = vi;
        p[i] -= lr * (d + mom * vi);
      }
    } else {
      for (std::int64_t i = b; i < e; ++i) {
        const float vi = mom * v[i] + damp * (g[i] + wd * p[i]);
        v[i] = vi;
        p[i] -= lr * vi;
      }
    }
  });
}

void adam_kernel(const OpCall& call, Context& ctx) {
  const AdamAttrs a = call.attr<AdamAttrs>();
  const float* __restrict g = in_ptr(call, 0);
  float* __restrict p = out_ptr(call, 0);
  float* __restrict m = out_ptr(call, 1);
  float* __restrict v = out_ptr(call, 2);
  const auto step = static_cast<double>(a.step);
  const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta1), step));
  const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(a.beta2), step));
  const float step_size = a.lr / bc1, inv_bc2_sqrt = 1 / std::sqrt(bc2);
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain, [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const float d = g[i] + wd * p[i];
      const float mi = b1 * m[i] + (1 - b1) * d;
      const float vi = b2 * v[i] + (1 - b2) * d * d;
      m[i] = mi;
      v[i] = vi;
      p[i] -= step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
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
