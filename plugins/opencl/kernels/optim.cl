// Optimizer updates (tessera::SgdAttrs, tessera::AdamAttrs): one work-item per parameter.

// mode: 0 no momentum, 1 first step (v = d), 2 momentum, plus 4 for Nesterov.
__kernel void sgd_update(__global const float* g, int og, __global float* p, int op,
                         __global float* v, int ov, int n, float lr, float momentum,
                         float dampening, float weight_decay, int mode) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float d = g[og + i] + weight_decay * p[op + i];
  if ((mode & 3) == 0) {
    p[op + i] -= lr * d;
    return;
  }
  const float vi = (mode & 3) == 1 ? d : momentum * v[ov + i] + (1.0f - dampening) * d;
  v[ov + i] = vi;
  p[op + i] -= lr * ((mode & 4) ? d + momentum * vi : vi);
}

__kernel void adam_update(__global const float* g, int og, __global float* p, int op,
                          __global float* m, int om, __global float* v, int ov, int n,
                          float step_size, float beta1, float beta2, float eps,
                          float weight_decay, float inv_bc2_sqrt) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float d = g[og + i] + weight_decay * p[op + i];
  const float mi = beta1 * m[om + i] + (1.0f - beta1) * d;
  const float vi = beta2 * v[ov + i] + (1.0f - beta2) * d * d;
  m[om + i] = mi;
  v[ov + i] = vi;
  p[op + i] -= step_size * mi / (sqrt(vi) * inv_bc2_sqrt + eps);
}
