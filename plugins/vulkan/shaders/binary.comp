#version 450
// add, sub, mul, div with broadcasting (tessera::common::Strided after the three offsets).
// Push: oa, ob, oy, n, rank, shape[6], stride_a[6], stride_b[6]. STRIDED false: flat inputs.
// VEC4 (flat only; n and the offsets multiples of 4): each invocation does 4 elements as vec4.
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;  // 0 add, 1 sub, 2 mul, 3 div
layout(constant_id = 2) const bool STRIDED = true;
layout(constant_id = 3) const bool VEC4 = false;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(binding = 2) writeonly buffer Y4 { vec4 y4[]; };

vec4 apply(vec4 x, vec4 z) {
  if (OP == 0) return x + z;
  if (OP == 1) return x - z;
  if (OP == 2) return x * z;
  return x / z;
}

void main() {
  const int i = int(flat_index());
  if (VEC4) {
    if (i >= pc.w[3] / 4) return;
    y4[pc.w[2] / 4 + i] = apply(a4[pc.w[0] / 4 + i], b4[pc.w[1] / 4 + i]);
    return;
  }
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
  y[pc.w[2] + i] = apply(vec4(a[ia]), vec4(b[ib])).x;
}
