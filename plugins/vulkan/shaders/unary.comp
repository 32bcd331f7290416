#version 450
// Element-wise ops of one input (and relu_backward of two). Push: ox, oy, n, s (float), og.
#include "common.glsl"

// 0 add_scalar, 1 mul_scalar, 2 relu, 3 exp, 4 log, 5 tanh, 6 sigmoid, 7 relu_backward
layout(constant_id = 1) const int OP = 0;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 2) readonly buffer G { float g[]; };  // relu_backward's gradient

void main() {
  const int i = int(flat_index());
  if (i >= pc.w[2]) return;
  const float v = x[pc.w[0] + i], s = pf(3);
  float r;
  if (OP == 0) r = v + s;
  else if (OP == 1) r = v * s;
  else if (OP == 2) r = v > 0.0 ? v : 0.0;
  else if (OP == 3) r = exp(v);
  else if (OP == 4) r = log(v);
  else if (OP == 5) r = tanh(v);
  else if (OP == 6) r = 1.0 / (1.0 + exp(-v));
  else r = v > 0.0 ? g[pc.w[4] + i] : 0.0;
  y[pc.w[1] + i] = r;
}
