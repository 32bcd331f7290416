// The portable kernel dialect as GLSL 450 for Vulkan (README.md in this folder). Included after
// `#version 450` by the wrapper that the build writes for every NAME.tk; prelude.cl is its OpenCL
// twin, macro for macro.
#extension GL_EXT_control_flow_attributes : enable
#ifdef TK_BYTES
#extension GL_EXT_shader_8bit_storage : require
#endif
#ifdef TK_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int TK_SHM = 1;
layout(constant_id = 2) const int V0 = 0;
layout(constant_id = 3) const int V1 = 0;
layout(constant_id = 4) const int V2 = 0;
layout(constant_id = 5) const int V3 = 0;

// Words 0..7: element offsets of bindings 0..7; word 8: the number of work-groups; then P(i).
layout(push_constant) uniform TkPush {
  int w[32];
} tk_pc;

// A kernel that reads or writes 4 floats at once (SHM4) gets its scratch as vec4s (the build
// defines TK_SHM4 for it); SHM(i) then picks a component.
#ifdef TK_SHM4
shared vec4 tk_shm4[(TK_SHM + 3) / 4];
#define SHM(i) tk_shm4[(i) >> 2][(i) & 3]
#define SHM4(i) tk_shm4[(i)]
#else
shared float tk_shm[TK_SHM];
#define SHM(i) tk_shm[(i)]
#endif

#ifdef TK_BYTES
#define TK_BYTE_VIEW(k) \
  layout(binding = k) TK_ACCESS(k) buffer TkB##k { uint8_t v[]; } tk_b##k;
#else
#define TK_BYTE_VIEW(k)
#endif
// A binding the kernel declares read-only ("// tk-readonly:", TK_MODE_<k> RO) is readonly and
// restrict: the kernel never writes it, and its launch binds no tensor that another binding
// writes. One declared write-only ("// tk-writeonly:", WO) is writeonly and restrict: never read,
// and no other binding of the launch overlaps it. NVIDIA's Vulkan compiler needs them to keep
// loads in flight across stores (docs/performance.md); OpenCL is told the same (prelude.cl).
#define TK_ACCESS_RW
#define TK_ACCESS_RO readonly restrict
#define TK_ACCESS_WO writeonly restrict
// 16-bit stores (STS, STH, STBH) need 16-bit storage (the build defines TK_HALF for a kernel
// naming them); 16-bit loads read the 32-bit view and need nothing.
#ifdef TK_HALF
#define TK_HALF_VIEW(k) \
  layout(binding = k) TK_ACCESS(k) buffer TkS##k { uint16_t v[]; } tk_s##k;
#else
#define TK_HALF_VIEW(k)
#endif
#define TK_PASTE(a, b) a##b
#define TK_ACCESS_OF(mode) TK_PASTE(TK_ACCESS_, mode)
#define TK_ACCESS(k) TK_ACCESS_OF(TK_MODE_##k)
#define TK_BUFFER(k)                                                      \
  layout(binding = k) TK_ACCESS(k) buffer TkF##k { float v[]; } tk_f##k;  \
  layout(binding = k) TK_ACCESS(k) buffer TkV##k { vec4 v[]; } tk_v##k;   \
  layout(binding = k) TK_ACCESS(k) buffer TkI##k { int v[]; } tk_i##k;    \
  TK_BYTE_VIEW(k)                                                         \
  TK_HALF_VIEW(k)
TK_BUFFER(0)
TK_BUFFER(1)
TK_BUFFER(2)
TK_BUFFER(3)
TK_BUFFER(4)
TK_BUFFER(5)
TK_BUFFER(6)
TK_BUFFER(7)

#define P(i) tk_pc.w[9 + (i)]
#define PF(i) intBitsToFloat(tk_pc.w[9 + (i)])
#define NGROUPS tk_pc.w[8]

#define GROUP int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x)
#define LID int(gl_LocalInvocationID.x)
#define GSIZE int(gl_WorkGroupSize.x)
#define GID (GROUP * GSIZE + LID)
// barrier() alone: glslang gives it workgroup-memory acquire-release semantics, which order
// shared memory (as ggml's shaders rely on). memoryBarrierShared() before it added an
// OpMemoryBarrier of device scope that nothing needs (no measured change on the H100: the tiled
// attention kernels took the same time with and without it).
#define BARRIER() barrier()

#define TK_AT(k, i) (tk_pc.w[k] + (i))
#define LDF(k, i) tk_f##k.v[TK_AT(k, i)]
#define STF(k, i, x) (tk_f##k.v[TK_AT(k, i)] = (x))
#define F4 vec4
#define MK4(a, b, c, d) vec4((a), (b), (c), (d))
#define LDF4(k, i) tk_v##k.v[tk_pc.w[k] / 4 + (i)]
#define STF4(k, i, x) (tk_v##k.v[tk_pc.w[k] / 4 + (i)] = (x))
#define LDI(k, i) tk_i##k.v[TK_AT(k, i)]
#define STI(k, i, x) (tk_i##k.v[TK_AT(k, i)] = (x))
#define LDB(k, i) int(tk_b##k.v[TK_AT(k, i)])
#define STB(k, i, x) (tk_b##k.v[TK_AT(k, i)] = uint8_t(x))
#define LDL(k, i) tk_i##k.v[2 * TK_AT(k, i)]
#define LDS(k, i) ((tk_i##k.v[TK_AT(k, i) >> 1] >> ((TK_AT(k, i) & 1) << 4)) & 0xffff)
#define LDS2(k, i) tk_i##k.v[TK_AT(k, i) >> 1]
#define STS(k, i, x) (tk_s##k.v[TK_AT(k, i)] = uint16_t(x))
#define STS2(k, i, w) (tk_i##k.v[TK_AT(k, i) >> 1] = int(w))
#define STL(k, i, x) tk_stl_##k(TK_AT(k, i), (x))

#define TO_F(x) float(x)
#define TO_I(x) int(x)
#define TO_U(x) uint(x)
#define AS_F(x) intBitsToFloat(int(x))
#define AS_I(x) floatBitsToInt(x)
#define AS_U(x) floatBitsToUint(x)
#define FABS(x) abs(x)
#define RSQRT(x) inversesqrt(x)
#define MULHI_U(a, b) tk_mulhi((a), (b))
#define UNROLL [[unroll]]

uint tk_mulhi(uint a, uint b) {
  uint hi, lo;
  umulExtended(a, b, hi, lo);
  return hi;
}

// i64 stores: the low word and its sign extension.
#define TK_STL(k)                    \
  void tk_stl_##k(int at, int x) {   \
    tk_i##k.v[2 * at] = x;           \
    tk_i##k.v[2 * at + 1] = x >> 31; \
  }
// (not for read-only bindings)
#ifndef TK_READONLY_0
TK_STL(0)
#endif
#ifndef TK_READONLY_1
TK_STL(1)
#endif
#ifndef TK_READONLY_2
TK_STL(2)
#endif
#ifndef TK_READONLY_3
TK_STL(3)
#endif
#ifndef TK_READONLY_4
TK_STL(4)
#endif
#ifndef TK_READONLY_5
TK_STL(5)
#endif
#ifndef TK_READONLY_6
TK_STL(6)
#endif
#ifndef TK_READONLY_7
TK_STL(7)
#endif

// The body of KERNEL runs for work-groups below NGROUPS only (the grid is rounded up).
#define KERNEL                        \
  void tk_body();                     \
  void main() {                       \
    if (GROUP >= NGROUPS) return;     \
    tk_body();                        \
  }                                   \
  void tk_body()

#include "common.tk"
