// Reductions along one axis of a contiguous tensor seen as [outer, n, inner], softmax and
// cross-entropy. Line l = (o, i) starts at element o * n * inner + i and steps by inner.

#define LINE_START(l) (((l) / inner) * n * inner + (l) % inner)

// One work-item per output: lines with inner > 1 are read coalesced across work-items.
__kernel void sum_lines(__global const float* x, int ox, __global float* y, int oy, int outer,
                        int n, int inner, float scale) {
  const int l = get_global_id(0);
  if (l >= outer * inner) return;
  __global const float* p = x + ox + LINE_START(l);
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += p[k * inner];
  y[oy + l] = acc * scale;
}

// One work-group of REDUCE_WG per output: contiguous lines (inner == 1).
__kernel void sum_rows(__global const float* x, int ox, __global float* y, int oy, int n,
                       float scale) {
  __local float part[REDUCE_WG];
  const int row = get_group_id(0), t = get_local_id(0);
  __global const float* p = x + ox + row * n;
  float acc = 0.0f;
  for (int k = t; k < n; k += REDUCE_WG) acc += p[k];
  part[t] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = REDUCE_WG / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) y[oy + row] = part[0] * scale;
}

__kernel void max_lines(__global const float* x, int ox, __global float* y, int oy, int outer,
                        int n, int inner) {
  const int l = get_global_id(0);
  if (l >= outer * inner) return;
  __global const float* p = x + ox + LINE_START(l);
  float m = p[0];
  for (int k = 1; k < n; ++k) m = fmax(m, p[k * inner]);
  y[oy + l] = m;
}

// The index of the first maximum of a line (argmax's rule).
int first_max(__global const float* p, int n, int inner) {
  int best = 0;
  for (int k = 1; k < n; ++k)
    if (p[k * inner] > p[best * inner]) best = k;
  return best;
}

__kernel void argmax_lines(__global const float* x, int ox, __global int* y, int oy, int outer,
                           int n, int inner) {
  const int l = get_global_id(0);
  if (l >= outer * inner) return;
  y[oy + l] = first_max(x + ox + LINE_START(l), n, inner);
}

__kernel void max_backward(__global const float* g, int og, __global const float* x, int ox,
                           __global float* y, int oy, int outer, int n, int inner) {
  const int l = get_global_id(0);
  if (l >= outer * inner) return;
  const int start = LINE_START(l);
  const int best = first_max(x + ox + start, n, inner);
  const float v = g[og + l];
  for (int k = 0; k < n; ++k) y[oy + start + k * inner] = k == best ? v : 0.0f;
}

// LOG: log_softmax instead of softmax.
__kernel void softmax_lines(__global const float* x, int ox, __global float* y, int oy,
                            int outer, int n, int inner, int log_) {
  const int l = get_global_id(0);
  if (l >= outer * inner) return;
  const int start = LINE_START(l);
  __global const float* p = x + ox + start;
  __global float* q = y + oy + start;
  float m = -INFINITY;
  for (int k = 0; k < n; ++k) m = fmax(m, p[k * inner]);
  float total = 0.0f;
  for (int k = 0; k < n; ++k) total += exp(p[k * inner] - m);
  if (log_) {
    const float lse = m + log(total);
    for (int k = 0; k < n; ++k) q[k * inner] = p[k * inner] - lse;
  } else {
    const float inv = 1.0f / total;
    for (int k = 0; k < n; ++k) q[k * inner] = exp(p[k * inner] - m) * inv;
  }
}
