#version 450
// One invocation per line of a tensor seen as [outer, n, inner] (line l starts at
// (l / inner) * n * inner + l % inner and steps by inner).
// Push: ox, oy, outer, n, inner, scale (float), og (max_backward's gradient).
#include "common.glsl"

// 0 sum (times scale), 1 max, 2 argmax, 3 softmax, 4 log_softmax, 5 max_backward
layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 1) writeonly buffer YI { int yi[]; };
layout(binding = 2) readonly buffer G { float g[]; };

void main() {
  const int l = int(flat_index());
  const int n = pc.w[3], inner = pc.w[4];
  if (l >= pc.w[2] * inner) return;
  const int start = (l / inner) * n * inner + l % inner;
  const int p = pc.w[0] + start;
  if (OP == 0) {
    float acc = 0.0;
    for (int k = 0; k < n; ++k) acc += x[p + k * inner];
    y[pc.w[1] + l] = acc * pf(5);
  } else if (OP == 1) {
    float m = x[p];
    for (int k = 1; k < n; ++k) m = max(m, x[p + k * inner]);
    y[pc.w[1] + l] = m;
  } else if (OP == 2 || OP == 5) {
    int best = 0;
    for (int k = 1; k < n; ++k)
      if (x[p + k * inner] > x[p + best * inner]) best = k;
    if (OP == 2) {
      yi[pc.w[1] + l] = best;
    } else {
      const float v = g[pc.w[6] + l];
      for (int k = 0; k < n; ++k) y[pc.w[1] + start + k * inner] = k == best ? v : 0.0;
    }
  } else {
    float m = -1.0 / 0.0;
    for (int k = 0; k < n; ++k) m = max(m, x[p + k * inner]);
    float total = 0.0;
    for (int k = 0; k < n; ++k) total += exp(x[p + k * inner] - m);
    const int q = pc.w[1] + start;
    if (OP == 4) {
      const float lse = m + log(total);
      for (int k = 0; k < n; ++k) y[q + k * inner] = x[p + k * inner] - lse;
    } else {
      const float inv = 1.0 / total;
      for (int k = 0; k < n; ++k) y[q + k * inner] = exp(x[p + k * inner] - m) * inv;
    }
  }
}
