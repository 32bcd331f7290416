// Max pooling (NCHW); the convolutions live in the portable layer (plugins/common/kernels).

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
