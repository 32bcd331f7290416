// The OpenCL C built-ins a portable kernel's PTX module needs beyond those of
// ../../common/nvidia/workitems.cl (built after it when clang compiles a portable kernel for this
// plugin: ../../common/nvidia/ptx_module.cmake's KIND portable). The
// kernel's program includes common.tk, whose functions clang emits whether or not the kernel
// calls them, so every built-in they call is defined here, exactly where PTX has the instruction:
// get_local_size reads ntid (workitems.cl's TK_SREG); fabs is abs.f32; exp is ex2.approx of
// x log2(e) split into an integer power of two and a remainder of at most a half (a few ulps, as
// CUDA's expf with fast math: no module that calls it is built, the GEMM's never does).
size_t __attribute__((overloadable)) get_local_size(uint d) {
  return TK_SREG(d, ntid, 1);
}
float __attribute__((overloadable)) fabs(float x) {
  return __builtin_fabsf(x);
}
float __attribute__((overloadable)) exp(float x) {
  // e^x overflows past 88.73 and is 0 below -103.98 (subnormals flushed).
  if (!(x < 88.73f)) return x != x ? x : INFINITY;
  if (x < -103.98f) return 0.0f;
  const float n = __builtin_rintf(x * 1.44269504f);
  // x log2(e) - n with log2(e) in two parts: the remainder to about 2^-30.
  const float r = __builtin_fmaf(x, 1.44269504f, -n) + x * 1.92596299e-8f;
  // 2^n as two factors, each a normal float for n in [-150, 128].
  const int h = (int)n / 2;
  return __nvvm_ex2_approx_f(r) * as_float((h + 127) << 23) * as_float(((int)n - h + 127) << 23);
}
