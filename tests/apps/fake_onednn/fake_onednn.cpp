// A stand-in for oneDNN's libdnnl.so.2 that has neither dnnl_sgemm nor dnnl_version: the CPU
// plugin must reject it with the reason, and (TESSERA_CPU_GEMM=auto) fall back to OpenBLAS.
extern "C" int tessera_fake_onednn_marker() {
  return 0;
}
