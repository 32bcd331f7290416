// Element-wise kernels. Every tensor argument is a buffer plus an element offset; n is the
// element count of the (contiguous) output. One work-item per output element.

// Strided views (host side: tessera::common::Strided): output index i has coordinates in
// shape[0..rank) and reads input k at its offset + sum(coord * stride[k]).
typedef struct {
  int n;
  int rank;
  int shape[6];
  int stride[2][6];
} Strided;

#define BINARY(NAME, EXPR)                                                                      \
  __kernel void NAME(__global const float* a, int oa, __global const float* b, int ob,          \
                     __global float* y, int oy, Strided g) {                                    \
    const int i = get_global_id(0);                                                             \
    if (i >= g.n) return;                                                                       \
    int ia = oa, ib = ob, r = i;                                                                \
    for (int d = g.rank - 1; d >= 0; --d) {                                                     \
      const int c = r % g.shape[d];                                                             \
      r /= g.shape[d];                                                                          \
      ia += c * g.stride[0][d];                                                                 \
      ib += c * g.stride[1][d];                                                                 \
    }                                                                                           \
    const float x = a[ia], z = b[ib];                                                           \
    y[oy + i] = EXPR;                                                                           \
  }                                                                                             \
  __kernel void NAME##_flat(__global const float* a, int oa, __global const float* b, int ob,   \
                            __global float* y, int oy, int n) {                                 \
    const int i = get_global_id(0);                                                             \
    if (i >= n) return;                                                                         \
    const float x = a[oa + i], z = b[ob + i];                                                   \
    y[oy + i] = EXPR;                                                                           \
  }                                                                                             \
  /* n and the offsets are multiples of 4: each work-item does 4 elements */                    \
  __kernel void NAME##_flat4(__global const float* a, int oa, __global const float* b, int ob,  \
                             __global float* y, int oy, int n) {                                \
    const int i = get_global_id(0);                                                             \
    if (i >= n / 4) return;                                                                     \
    const float4 x = vload4(i, a + oa), z = vload4(i, b + ob);                                  \
    vstore4(EXPR, i, y + oy);                                                                   \
  }

BINARY(add, x + z)
BINARY(sub, x - z)
BINARY(mul, x * z)
BINARY(div_, x / z)

// Any 4-byte dtype.
__kernel void copy_strided(__global const uint* x, int ox, __global uint* y, int oy, Strided g) {
  const int i = get_global_id(0);
  if (i >= g.n) return;
  int ix = ox, r = i;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int c = r % g.shape[d];
    r /= g.shape[d];
    ix += c * g.stride[0][d];
  }
  y[oy + i] = x[ix];
}

__kernel void fill(__global uint* y, int oy, int n, uint bits) {
  const int i = get_global_id(0);
  if (i < n) y[oy + i] = bits;
}

// tessera::dropout_hash; key = tessera::dropout_key(seed), computed on the host.
uint dropout_hash(uint x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__kernel void dropout_mask(__global float* y, int oy, int n, uint key, float p, float keep) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float u = (float)(dropout_hash((uint)i ^ key) >> 8) * (1.0f / 16777216.0f);
  y[oy + i] = u >= p ? keep : 0.0f;
}
