#version 450
// Strided copy of 4-byte elements, fill, and dropout_mask.
// copy: ox, oy, n, rank, shape[6], stride[6].  fill: -, oy, n, bits.  dropout: -, oy, n, key, p, keep
#include "common.glsl"

layout(constant_id = 1) const int OP = 0;  // 0 copy, 1 fill, 2 dropout_mask

layout(binding = 0) readonly buffer X { uint x[]; };
layout(binding = 1) writeonly buffer Y { uint y[]; };

// tessera::dropout_hash
uint dropout_hash(uint v) {
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return v;
}

void main() {
  const int i = int(flat_index());
  if (i >= pc.w[2]) return;
  if (OP == 0) {
    int ix = pc.w[0], r = i;
    for (int d = pc.w[3] - 1; d >= 0; --d) {
      const int c = r % pc.w[4 + d];
      r /= pc.w[4 + d];
      ix += c * pc.w[10 + d];
    }
    y[pc.w[1] + i] = x[ix];
  } else if (OP == 1) {
    y[pc.w[1] + i] = uint(pc.w[3]);
  } else {
    const float u = float(dropout_hash(uint(i) ^ uint(pc.w[3])) >> 8) * (1.0 / 16777216.0);
    y[pc.w[1] + i] = floatBitsToUint(u >= pf(4) ? pf(5) : 0.0);
  }
}
