#version 450
// Optimizer updates (tessera::SgdAttrs, tessera::AdamAttrs), one invocation per parameter.
//   OP 0 sgd:  og, op, ov, n, lr, momentum, dampening, weight_decay, mode
//              (mode: 0 no momentum, 1 first step, 2 momentum, +4 Nesterov)
//   OP 1 adam: og, op, om, n, step_size, beta1, beta2, eps, weight_decay, inv_bc2_sqrt, ov
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer Gr { float g[]; };
layout(binding = 1) buffer P { float p[]; };
layout(binding = 2) buffer M { float m[]; };
layout(binding = 3) buffer V { float v[]; };

void main() {
  const int i = int(flat_index());
  if (i >= pc.w[3]) return;
  const int pi = pc.w[1] + i;
  if (OP == 0) {
    const float lr = pf(4), momentum = pf(5), dampening = pf(6);
    const int mode = pc.w[8];
    const float d = g[pc.w[0] + i] + pf(7) * p[pi];
    if ((mode & 3) == 0) {
      p[pi] -= lr * d;
      return;
    }
    const int vi_at = pc.w[2] + i;
    const float vi = (mode & 3) == 1 ? d : momentum * m[vi_at] + (1.0 - dampening) * d;
    m[vi_at] = vi;
    p[pi] -= lr * ((mode & 4) != 0 ? d + momentum * vi : vi);
  } else {
    const float beta1 = pf(5), beta2 = pf(6);
    const float d = g[pc.w[0] + i] + pf(8) * p[pi];
    const float mi = beta1 * m[pc.w[2] + i] + (1.0 - beta1) * d;
    const float vi = beta2 * v[pc.w[10] + i] + (1.0 - beta2) * d * d;
    m[pc.w[2] + i] = mi;
    v[pc.w[10] + i] = vi;
    p[pi] -= pf(4) * mi / (sqrt(vi) * pf(9) + pf(7));
  }
}
