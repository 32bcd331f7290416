#version 450
// Reductions where one work-group of WG (spec constant 0, a power of two) invocations produces
// one value:
//   OP 0 sum_rows:      row r of [rows, n] summed, times scale.  Push: ox, oy, n, scale
//   (OP 1 was cross_entropy: it moved to the portable layer, plugins/common/kernels.)
//   OP 2 conv weight gradient: one weight (o, c, ki, kj) per work-group.  Push: ox, oy, og, conv[13]
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 2) readonly buffer G { float gy[]; };

shared float part[gl_WorkGroupSize.x];

void main() {
  const int t = int(gl_LocalInvocationID.x), wg = int(gl_WorkGroupSize.x);
  const int group = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
  float acc = 0.0;
  if (OP == 0) {
    const int n = pc.w[2], p = pc.w[0] + group * n;
    for (int k = t; k < n; k += wg) acc += x[p + k];
  } else {
    // conv: n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw at pc.w[3..15]
    const int N = pc.w[3], C = pc.w[4], H = pc.w[5], W = pc.w[6], O = pc.w[7];
    const int KH = pc.w[8], KW = pc.w[9], HO = pc.w[10], WO = pc.w[11];
    const int kj = group % KW, ki = (group / KW) % KH, c = (group / (KW * KH)) % C;
    const int o = group / (KW * KH * C);
    const int plane = HO * WO;
    for (int p = t; p < N * plane; p += wg) {
      const int b = p / plane, oh = (p % plane) / WO, ow = p % WO;
      const int ih = oh * pc.w[12] - pc.w[14] + ki, iw = ow * pc.w[13] - pc.w[15] + kj;
      if (ih >= 0 && ih < H && iw >= 0 && iw < W)
        acc += gy[pc.w[2] + (b * O + o) * plane + oh * WO + ow] *
               x[pc.w[0] + ((b * C + c) * H + ih) * W + iw];
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
    else y[pc.w[1] + group] = part[0];
  }
}
