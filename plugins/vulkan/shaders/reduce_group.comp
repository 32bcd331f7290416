#version 450
// Reductions where one work-group of WG (spec constant 0, a power of two) invocations produces
// one value:
//   OP 0 sum_rows:      row r of [rows, n] summed, times scale.  Push: ox, oy, n, scale
//   OP 1 cross_entropy: mean of lse(row) - row[label], NaN on a bad label.  Push: ox, oy, ol, rows, c
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 2) readonly buffer L { int labels[]; };

shared float part[gl_WorkGroupSize.x];

float log_sum_exp(int row, int c) {
  float m = -1.0 / 0.0;
  for (int k = 0; k < c; ++k) m = max(m, x[row + k]);
  float total = 0.0;
  for (int k = 0; k < c; ++k) total += exp(x[row + k] - m);
  return m + log(total);
}

void main() {
  const int t = int(gl_LocalInvocationID.x), wg = int(gl_WorkGroupSize.x);
  const int group = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
  float acc = 0.0;
  if (OP == 0) {
    const int n = pc.w[2], p = pc.w[0] + group * n;
    for (int k = t; k < n; k += wg) acc += x[p + k];
  } else if (OP == 1) {
    const int rows = pc.w[3], c = pc.w[4];
    for (int r = t; r < rows; r += wg) {
      const int label = labels[pc.w[2] + r];
      const int row = pc.w[0] + r * c;
      acc += (label < 0 || label >= c) ? intBitsToFloat(0x7fc00000)
                                       : log_sum_exp(row, c) - x[row + label];
    }
  }
  part[t] = acc;
  barrier();
  for (int s = wg / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  if (t == 0) {
    if (OP == 0) y[pc.w[1] + group] = part[0] * pf(3);
    else y[pc.w[1]] = part[0] / float(pc.w[3]);
  }
}
