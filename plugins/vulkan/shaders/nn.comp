#version 450
// One invocation per output element.
//   OP 0 conv2d: y[b,o,oh,ow].  OP 1 conv2d_backward_input: dx[b,c,ih,iw].
//     Push: ox (x or gy), ow (weights), oy, n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw
//   OP 2 max_pool2d: y and the index h*W+w of the first maximum.
//   OP 3 max_pool2d_backward: dx, summing the windows that chose each input.
//     Push: ox (x or gy), oi (indices), oy, planes, h, w, ho, wo, kh, kw, sh, sw
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
  if (OP == 0 || OP == 1) {
    const int N = pc.w[3], C = pc.w[4], H = pc.w[5], W = pc.w[6], O = pc.w[7];
    const int KH = pc.w[8], KW = pc.w[9], HO = pc.w[10], WO = pc.w[11];
    const int SH = pc.w[12], SW = pc.w[13], PH = pc.w[14], PW = pc.w[15];
    float acc = 0.0;
    if (OP == 0) {
      if (i >= N * O * HO * WO) return;
      const int ow = i % WO, oh = (i / WO) % HO, o = (i / (WO * HO)) % O, b = i / (WO * HO * O);
      for (int c = 0; c < C; ++c) {
        const int xp = pc.w[0] + (b * C + c) * H * W, wp = pc.w[1] + (o * C + c) * KH * KW;
        for (int ki = 0; ki < KH; ++ki) {
          const int ih = oh * SH - PH + ki;
          if (ih < 0 || ih >= H) continue;
          for (int kj = 0; kj < KW; ++kj) {
            const int iw = ow * SW - PW + kj;
            if (iw >= 0 && iw < W) acc += x[xp + ih * W + iw] * wt[wp + ki * KW + kj];
          }
        }
      }
    } else {
      if (i >= N * C * H * W) return;
      const int iw = i % W, ih = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
      for (int ki = 0; ki < KH; ++ki) {
        const int th = ih + PH - ki;
        if (th < 0 || th % SH != 0 || th / SH >= HO) continue;
        const int oh = th / SH;
        for (int kj = 0; kj < KW; ++kj) {
          const int tw = iw + PW - kj;
          if (tw < 0 || tw % SW != 0 || tw / SW >= WO) continue;
          const int ow = tw / SW;
          for (int o = 0; o < O; ++o)
            acc += x[pc.w[0] + ((b * O + o) * HO + oh) * WO + ow] *
                   wt[pc.w[1] + ((o * C + c) * KH + ki) * KW + kj];
        }
      }
    }
    y[pc.w[2] + i] = acc;
  } else if (OP == 2 || OP == 3) {
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
  }
}
