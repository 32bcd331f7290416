#version 450
// One invocation per output element (the convolutions moved to the portable layer,
// plugins/common/kernels/conv2d.tk; OP 0 and 1 are no longer used).
//   OP 2 max_pool2d: y and the index h*W+w of the first maximum.
//   OP 3 max_pool2d_backward: dx, summing the windows that chose each input.
//     Push: ox (x or gy), oi (indices), oy, planes, h, w, ho, wo, kh, kw, sh, sw
//   OP 4 cross_entropy_backward: one row.  Push: ox, ol, oy, og, rows, c
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { float wt[]; };
layout(binding = 1) readonly buffer I { int idx_in[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 3) writeonly buffer IO { int idx_out[]; };
layout(binding = 3) readonly buffer G { float grad[]; };

void main() {
  const int i = int(flat_index());
  if (OP == 2 || OP == 3) {
    const int planes = pc.w[3], H = pc.w[4], W = pc.w[5], HO = pc.w[6], WO = pc.w[7];
    const int KH = pc.w[8], KW = pc.w[9], SH = pc.w[10], SW = pc.w[11];
    if (OP == 2) {
      if (i >= planes * HO * WO) return;
      const int ow = i % WO, oh = (i / WO) % HO, p = i / (WO * HO);
      const int src = pc.w[0] + p * H * W;
      int best = oh * SH * W + ow * SW;
      for (int ki = 0; ki < KH; ++ki)
        for (int kj = 0; kj < KW; ++kj) {
          const int at = (oh * SH + ki) * W + ow * SW + kj;
          if (x[src + at] > x[src + best]) best = at;
        }
      y[pc.w[2] + i] = x[src + best];
      idx_out[pc.w[1] + i] = best;
    } else {
      if (i >= planes * H * W) return;
      const int iw = i % W, ih = (i / W) % H, p = i / (W * H);
      const int at = ih * W + iw;
      const int oh0 = ih >= KH ? (ih - KH) / SH + 1 : 0, oh1 = min(ih / SH, HO - 1);
      const int ow0 = iw >= KW ? (iw - KW) / SW + 1 : 0, ow1 = min(iw / SW, WO - 1);
      float acc = 0.0;
      for (int oh = oh0; oh <= oh1; ++oh)
        for (int ow = ow0; ow <= ow1; ++ow) {
          const int k = (p * HO + oh) * WO + ow;
          if (idx_in[pc.w[1] + k] == at) acc += x[pc.w[0] + k];
        }
      y[pc.w[2] + i] = acc;
    }
  } else {
    const int rows = pc.w[4], c = pc.w[5];
    if (i >= rows) return;
    const int row = pc.w[0] + i * c, dst = pc.w[2] + i * c;
    const int label = idx_in[pc.w[1] + i];
    const float scale = grad[pc.w[3]] / float(rows);
    float m = -1.0 / 0.0;
    for (int k = 0; k < c; ++k) m = max(m, x[row + k]);
    float total = 0.0;
    for (int k = 0; k < c; ++k) total += exp(x[row + k] - m);
    const float lse = m + log(total);
    const bool valid = label >= 0 && label < c;
    for (int k = 0; k < c; ++k)
      y[dst + k] = valid ? (exp(x[row + k] - lse) - (k == label ? 1.0 : 0.0)) * scale
                         : intBitsToFloat(0x7fc00000);
  }
}
