// Direct convolution, its two gradients, and max pooling (NCHW).

typedef struct {
  int n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw;
} Conv;

// One work-item per output element (b, o, oh, ow).
__kernel void conv2d(__global const float* x, int ox, __global const float* wt, int ow_,
                     __global float* y, int oy, Conv g) {
  const int i = get_global_id(0);
  const int total = g.n * g.o * g.ho * g.wo;
  if (i >= total) return;
  const int ow = i % g.wo, oh = (i / g.wo) % g.ho, o = (i / (g.wo * g.ho)) % g.o;
  const int b = i / (g.wo * g.ho * g.o);
  float acc = 0.0f;
  for (int c = 0; c < g.c; ++c) {
    __global const float* xp = x + ox + (b * g.c + c) * g.h * g.w;
    __global const float* wp = wt + ow_ + (o * g.c + c) * g.kh * g.kw;
    for (int ki = 0; ki < g.kh; ++ki) {
      const int ih = oh * g.sh - g.ph + ki;
      if (ih < 0 || ih >= g.h) continue;
      for (int kj = 0; kj < g.kw; ++kj) {
        const int iw = ow * g.sw - g.pw + kj;
        if (iw >= 0 && iw < g.w) acc += xp[ih * g.w + iw] * wp[ki * g.kw + kj];
      }
    }
  }
  y[oy + i] = acc;
}

// One work-item per input element (b, c, ih, iw): the output pixels whose window covers it.
__kernel void conv2d_backward_input(__global const float* gy, int og, __global const float* wt,
                                    int ow_, __global float* dx, int ox, Conv g) {
  const int i = get_global_id(0);
  const int total = g.n * g.c * g.h * g.w;
  if (i >= total) return;
  const int iw = i % g.w, ih = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c;
  const int b = i / (g.w * g.h * g.c);
  float acc = 0.0f;
  for (int ki = 0; ki < g.kh; ++ki) {
    const int th = ih + g.ph - ki;
    if (th < 0 || th % g.sh) continue;
    const int oh = th / g.sh;
    if (oh >= g.ho) continue;
    for (int kj = 0; kj < g.kw; ++kj) {
      const int tw = iw + g.pw - kj;
      if (tw < 0 || tw % g.sw) continue;
      const int ow = tw / g.sw;
      if (ow >= g.wo) continue;
      for (int o = 0; o < g.o; ++o)
        acc += gy[og + ((b * g.o + o) * g.ho + oh) * g.wo + ow] *
               wt[ow_ + ((o * g.c + c) * g.kh + ki) * g.kw + kj];
    }
  }
  dx[ox + i] = acc;
}

// One work-group of REDUCE_WG per weight (o, c, ki, kj): a sum over every sample and pixel.
__kernel void conv2d_backward_weight(__global const float* gy, int og, __global const float* x,
                                     int ox, __global float* dw, int ow_, Conv g) {
  __local float part[REDUCE_WG];
  const int wi = get_group_id(0), t = get_local_id(0);
  const int kj = wi % g.kw, ki = (wi / g.kw) % g.kh, c = (wi / (g.kw * g.kh)) % g.c;
  const int o = wi / (g.kw * g.kh * g.c);
  const int plane = g.ho * g.wo, count = g.n * plane;
  float acc = 0.0f;
  for (int p = t; p < count; p += REDUCE_WG) {
    const int b = p / plane, oh = (p % plane) / g.wo, ow = p % g.wo;
    const int ih = oh * g.sh - g.ph + ki, iw = ow * g.sw - g.pw + kj;
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
      acc += gy[og + (b * g.o + o) * plane + oh * g.wo + ow] *
             x[ox + ((b * g.c + c) * g.h + ih) * g.w + iw];
  }
  part[t] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = REDUCE_WG / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (t == 0) dw[ow_ + wi] = part[0];
}

typedef struct {
  int planes, h, w, ho, wo, kh, kw, sh, sw;
} Pool;

// One work-item per output; the index is h * W + w within the plane (first maximum wins).
__kernel void max_pool2d(__global const float* x, int ox, __global float* y, int oy,
                         __global int* idx, int oi, Pool g) {
  const int i = get_global_id(0);
  if (i >= g.planes * g.ho * g.wo) return;
  const int ow = i % g.wo, oh = (i / g.wo) % g.ho, p = i / (g.wo * g.ho);
  __global const float* src = x + ox + p * g.h * g.w;
  int best = oh * g.sh * g.w + ow * g.sw;
  for (int ki = 0; ki < g.kh; ++ki)
    for (int kj = 0; kj < g.kw; ++kj) {
      const int at = (oh * g.sh + ki) * g.w + ow * g.sw + kj;
      if (src[at] > src[best]) best = at;
    }
  y[oy + i] = src[best];
  idx[oi + i] = best;
}

// One work-item per input element: the sum of the gradients of the windows that chose it.
__kernel void max_pool2d_backward(__global const float* gy, int og, __global const int* idx,
                                  int oi, __global float* dx, int ox, Pool g) {
  const int i = get_global_id(0);
  if (i >= g.planes * g.h * g.w) return;
  const int iw = i % g.w, ih = (i / g.w) % g.h, p = i / (g.w * g.h);
  const int at = ih * g.w + iw;
  const int oh0 = ih >= g.kh ? (ih - g.kh) / g.sh + 1 : 0, oh1 = min(ih / g.sh, g.ho - 1);
  const int ow0 = iw >= g.kw ? (iw - g.kw) / g.sw + 1 : 0, ow1 = min(iw / g.sw, g.wo - 1);
  float acc = 0.0f;
  for (int oh = oh0; oh <= oh1; ++oh)
    for (int ow = ow0; ow <= ow1; ++ow) {
      const int k = (p * g.ho + oh) * g.wo + ow;
      if (idx[oi + k] == at) acc += gy[og + k];
    }
  dx[ox + i] = acc;
}
