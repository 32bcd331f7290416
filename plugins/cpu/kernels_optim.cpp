// Optimizer updates, one pass over each parameter.
#include <cmath>

#include "kernels.h"

namespace tessera::cpu {
namespace {

// Each loop is a function of plain values and __restrict pointers, so that the compiler
// vectorises it: inside a lambda the attributes live in the closure, which the stores through p
// and v might (as far as the compiler knows) overwrite, so every iteration reloaded them, scalar.
void sgd_range(const SgdAttrs a, const float* __restrict g, float* __restrict p,
               float* __restrict v, std::int64_t b, std::int64_t e) {
  const float lr = a.lr, wd = a.weight_decay, mom = a.momentum, damp = 1 - a.dampening;
  if (mom == 0) {
    for (std::int64_t i = b; i < e; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (a.first_step) {
    const bool nesterov = a.nesterov;
    for (std::int64_t i = b; i < e; ++i) {
      const float d = g[i] + wd * p[i];
      v[i] = d;
      p[i] -= lr * (nesterov ? d + mom * d : d);
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
}

void sgd_kernel(const OpCall& call, Context& ctx) {
  const SgdAttrs& a = call.attr<SgdAttrs>();
  const float* g = in_ptr(call, 0);
  float* p = out_ptr(call, 0);
  float* v = out_ptr(call, 1);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain,
                        [&](std::int64_t b, std::int64_t e) { sgd_range(a, g, p, v, b, e); });
}

struct Adam {
  float step_size, inv_bc2_sqrt, b1, b2, eps, wd;
};

void adam_range(const Adam a, const float* __restrict g, float* __restrict p, float* __restrict m,
                float* __restrict v, std::int64_t b, std::int64_t e) {
  const float step_size = a.step_size, inv_bc2_sqrt = a.inv_bc2_sqrt, b1 = a.b1, b2 = a.b2,
              eps = a.eps, wd = a.wd;
  for (std::int64_t i = b; i < e; ++i) {
    const float d = g[i] + wd * p[i];
    const float mi = b1 * m[i] + (1 - b1) * d;
    const float vi = b2 * v[i] + (1 - b2) * d * d;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
  }
}

void adam_kernel(const OpCall& call, Context& ctx) {
  const AdamAttrs& at = call.attr<AdamAttrs>();
  const auto step = static_cast<double>(at.step);
  const float bc1 = static_cast<float>(1 - std::pow(static_cast<double>(at.beta1), step));
  const float bc2 = static_cast<float>(1 - std::pow(static_cast<double>(at.beta2), step));
  const Adam a{at.lr / bc1, 1 / std::sqrt(bc2), at.beta1, at.beta2, at.eps, at.weight_decay};
  const float* g = in_ptr(call, 0);
  float* p = out_ptr(call, 0);
  float* m = out_ptr(call, 1);
  float* v = out_ptr(call, 2);
  ctx.pool.parallel_for(call.out(0).numel(), kElementGrain,
                        [&](std::int64_t b, std::int64_t e) { adam_range(a, g, p, m, v, b, e); });
}

}  // namespace

void register_optim(KernelTable& t, Context& ctx) {
  t[static_cast<std::size_t>(OpId::sgd_update)] =
      std::make_unique<CpuKernel>(ctx, sgd_kernel, f32_only);
  t[static_cast<std::size_t>(OpId::adam_update)] =
      std::make_unique<CpuKernel>(ctx, adam_kernel, f32_only);
}

}  // namespace tessera::cpu
