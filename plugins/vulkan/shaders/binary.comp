#version 450
// add, sub, mul, div with broadcasting (tessera::common::Strided after the three offsets).
// Push: oa, ob, oy, n, rank, shape[6], stride_a[6], stride_b[6]. STRIDED false: flat inputs.
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;  // 0 add, 1 sub, 2 mul, 3 div
layout(constant_id = 2) const bool STRIDED = true;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
  const int i = int(flat_index());
  if (i >= pc.w[3]) return;
  int ia = pc.w[0] + i, ib = pc.w[1] + i;
  if (STRIDED) {
    ia = pc.w[0];
    ib = pc.w[1];
    int r = i;
    for (int d = pc.w[4] - 1; d >= 0; --d) {
      const int c = r % pc.w[5 + d];
      r /= pc.w[5 + d];
      ia += c * pc.w[11 + d];
      ib += c * pc.w[17 + d];
    }
  }
  const float x = a[ia], z = b[ib];
  float v;
  if (OP == 0) v = x + z;
  else if (OP == 1) v = x - z;
  else if (OP == 2) v = x * z;
  else v = x / z;
  y[pc.w[2] + i] = v;
}
