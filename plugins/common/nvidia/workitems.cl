// The OpenCL C built-in functions this directory's kernels call, for clang's PTX modules of them
// (ptx_module.cmake, either kernel ABI): built before a kernel when clang compiles it for a plugin.
// With the targets nvptx64-nvidia-cuda and -nvcl, clang leaves them as calls to functions nobody
// defines (NVIDIA's OpenCL compiler provides its own; ptx_module.cmake refuses a module that still
// calls one). The
// work-item functions read PTX's special registers (dimensions past 2 give 0 for ids and 1 for
// counts, as OpenCL C defines); barrier() is bar.sync 0, which also orders the work-group's shared
// and global memory accesses, as OpenCL's barrier does; min() of two ints.
// PTX's special register NAME (tid, ctaid, ...) along dimension |d|, |past| beyond the third.
#define TK_SREG(d, name, past)                                   \
  ((d) == 0   ? __nvvm_read_ptx_sreg_##name##_x()                \
   : (d) == 1 ? __nvvm_read_ptx_sreg_##name##_y()                \
   : (d) == 2 ? __nvvm_read_ptx_sreg_##name##_z()                \
              : (past))
size_t __attribute__((overloadable)) get_local_id(uint d) {
  return TK_SREG(d, tid, 0);
}
size_t __attribute__((overloadable)) get_group_id(uint d) {
  return TK_SREG(d, ctaid, 0);
}
size_t __attribute__((overloadable)) get_num_groups(uint d) {
  return TK_SREG(d, nctaid, 1);
}
int __attribute__((overloadable)) min(int a, int b) {
  return a < b ? a : b;
}
void __attribute__((overloadable)) barrier(cl_mem_fence_flags flags) {
  (void)flags;
  __nvvm_bar_sync(0);
}
