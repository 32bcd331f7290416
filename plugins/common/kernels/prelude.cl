// The portable kernel dialect as OpenCL C 1.2 (README.md in this folder). The plugin builds
// prelude.cl, common.tk and one NAME.tk as one program, with -DV0=.. -DV3=..; prelude.glsl is its
// GLSL twin, macro for macro.
#ifndef V0
#define V0 0
#endif
#ifndef V1
#define V1 0
#endif
#ifndef V2
#define V2 0
#endif
#ifndef V3
#define V3 0
#endif
// V0..V3 are constants here (specialization constants in GLSL), so a kernel's `V0 == 2 || V0 == 5`
// has constant operands by design: clang-based compilers (PoCL) would warn about every one.
#ifdef __clang__
#pragma clang diagnostic ignored "-Wconstant-logical-operand"
#endif

// Words 0..7: element offsets of bindings 0..7; word 8: the number of work-groups; then P(i).
typedef struct {
  int w[32];
} TkParams;

#ifdef TK_SHM4
#define TK_SHM_T __local float4 *
#else
#define TK_SHM_T __local float *
#endif
#define TK_SHM_ARG TK_SHM_T tk_shm
// A binding the kernel declares read-only ("// tk-readonly:", TK_MODE_<k> RO) is const restrict:
// the kernel never writes it, and its launch binds no tensor that another binding writes. One
// declared write-only ("// tk-writeonly:", WO) is restrict: no other binding of the launch
// overlaps it.
#define TK_PTR_RW __global float *
#define TK_PTR_RO __global const float *restrict
#define TK_PTR_WO __global float *restrict
#define TK_PASTE(a, b) a##b
#define TK_PTR_OF(mode) TK_PASTE(TK_PTR_, mode)
#define TK_PTR(k) TK_PTR_OF(TK_MODE_##k)
#define TK_ARGS                                                                                 \
  TK_PTR(0) t0, TK_PTR(1) t1, TK_PTR(2) t2, TK_PTR(3) t3, TK_PTR(4) t4, TK_PTR(5) t5,           \
      TK_PTR(6) t6, TK_PTR(7) t7, const TkParams tk_p, TK_SHM_ARG
#define TK_PASS t0, t1, t2, t3, t4, t5, t6, t7, tk_p, tk_shm

#define P(i) tk_p.w[9 + (i)]
#define PF(i) as_float(tk_p.w[9 + (i)])
#define NGROUPS tk_p.w[8]

#define GROUP ((int)(get_group_id(1) * get_num_groups(0) + get_group_id(0)))
#define LID ((int)get_local_id(0))
#define GSIZE ((int)get_local_size(0))
#define GID (GROUP * GSIZE + LID)
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
// A kernel naming SHM4 (the plugin defines TK_SHM4 for it) takes its scratch as a __local float4
// argument, so that the driver aligns it for 4 floats: declared as float, NVIDIA's OpenCL gave it
// an address whose float4 accesses ended the context (CL_OUT_OF_RESOURCES at the next read, H100,
// driver 580).
#ifdef TK_SHM4
#define SHM(i) (((__local float*)tk_shm)[(i)])
#define SHM4(i) (tk_shm[(i)])
#else
#define SHM(i) tk_shm[(i)]
#endif

#define TK_AT(k, i) (tk_p.w[k] + (i))
#define LDF(k, i) t##k[TK_AT(k, i)]
#define STF(k, i, x) (t##k[TK_AT(k, i)] = (x))
#define F4 float4
#define MK4(a, b, c, d) ((float4)((a), (b), (c), (d)))
// As float4 elements, not vload4/vstore4: those promise 4-byte alignment only, and NVIDIA's
// compiler split each into four 4-byte accesses (the GEMM's loads, H100, driver 580). A buffer's
// start is aligned far beyond 16 bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN, the allocator's host
// memory) and the offset is a multiple of 4 elements.
#define LDF4(k, i) (((__global const float4*)t##k)[tk_p.w[k] / 4 + (i)])
#define STF4(k, i, x) (((__global float4*)t##k)[tk_p.w[k] / 4 + (i)] = (x))
#define LDI(k, i) ((__global const int*)t##k)[TK_AT(k, i)]
#define STI(k, i, x) (((__global int*)t##k)[TK_AT(k, i)] = (x))
#define LDB(k, i) ((int)((__global const uchar*)t##k)[TK_AT(k, i)])
#define STB(k, i, x) (((__global uchar*)t##k)[TK_AT(k, i)] = (uchar)(x))
#define LDL(k, i) ((int)((__global const long*)t##k)[TK_AT(k, i)])
#define STL(k, i, x) (((__global long*)t##k)[TK_AT(k, i)] = (long)(x))
#define LDS(k, i) ((int)((__global const ushort*)t##k)[TK_AT(k, i)])
#define LDS2(k, i) (((__global const int*)t##k)[TK_AT(k, i) >> 1])
#define STS(k, i, x) (((__global ushort*)t##k)[TK_AT(k, i)] = (ushort)(x))
#define STS2(k, i, w) (((__global uint*)t##k)[TK_AT(k, i) >> 1] = (uint)(w))

#define TO_F(x) ((float)(x))
#define TO_I(x) ((int)(x))
#define TO_U(x) ((uint)(x))
#define AS_F(x) as_float((int)(x))
#define AS_I(x) as_int(x)
#define AS_U(x) as_uint(x)
#define FABS(x) fabs(x)
#define RSQRT(x) rsqrt(x)
#define MULHI_U(a, b) mul_hi((uint)(a), (uint)(b))
#define UNROLL _Pragma("unroll")

// The body of KERNEL runs for work-groups below NGROUPS only (the grid is rounded up).
// TK_STATIC_SHM (the Vulkan plugin's PTX modules of a portable kernel, ../../vulkan/ptx/): the
// scratch is a static array of that many 4-float groups in tk_main, as a CUDA module has no
// __local argument to size; tk_main's own tk_shm argument stays in the signature, unread, and
// the body is inlined, so that its loads see the bindings' restrict.
#ifdef TK_STATIC_SHM
#define KERNEL                                                                 \
  static __attribute__((always_inline)) void tk_body(TK_ARGS);                 \
  __kernel void tk_main(TK_ARGS) {                                             \
    __local float4 tk_static_shm[TK_STATIC_SHM];                               \
    if (GROUP >= NGROUPS) return;                                              \
    tk_body(t0, t1, t2, t3, t4, t5, t6, t7, tk_p, (TK_SHM_T)tk_static_shm);   \
  }                                                                            \
  static __attribute__((always_inline)) void tk_body(TK_ARGS)
#else
#define KERNEL                                \
  void tk_body(TK_ARGS);                      \
  __kernel void tk_main(TK_ARGS) {            \
    if (GROUP >= NGROUPS) return;             \
    tk_body(TK_PASS);                         \
  }                                           \
  void tk_body(TK_ARGS)
#endif
