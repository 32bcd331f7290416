// The GEMM library, loaded at run time: oneDNN (Debian's libdnnl2) when it is installed, else
// OpenBLAS (libopenblas0). TESSERA_CPU_GEMM=onednn|openblas|auto chooses (auto is the default).
//
// Neither is linked. oneDNN is optional, so the plugin works without it. OpenBLAS picks its
// kernels when it is loaded, and under many hypervisors its CPU detection falls back to "Prescott"
// (SSE3) although the CPU has AVX2 or AVX-512, which makes SGEMM several times slower: the plugin
// reads the CPU's features, sets OPENBLAS_CORETYPE (unless the user set it) and only then opens it.
// oneDNN compiles its SGEMM for the CPU it runs on; on the batch-128 GEMMs of training it measured
// 5-25% faster than OpenBLAS 0.3.21's Cooperlake kernels (docs/performance.md).
//
// Either library runs single-threaded on the calling thread: the plugin cuts each GEMM into blocks
// for its own thread pool. A library's own threads would otherwise spin and yield beside the
// pool's between calls (a quarter of a training step's time on two cores went to OpenBLAS's
// sched_yield), and their small-GEMM threading costs more than the work at batch 128.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::cpu {

class Blas {
 public:
  enum class Library { onednn, openblas };

  // Row-major C[m,n] = op(A) op(B) + beta * C with op(X) = X or X^T, on the calling thread only.
  // m, n, k >= 1 and each fit in 32 bits; leading dimensions as in BLAS. With beta 0, C is not
  // read (NaN or garbage in C does not propagate). Throws BackendError if the library reports a
  // failure.
  void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
             std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
             std::int64_t ldc) const;

  // The same with A and B in bf16 (as bits) and C in f32, by oneDNN's dnnl_gemm_bf16bf16f32
  // (AVX-512 BF16 or AMX instructions where the CPU has them). Only where has_gemm_bf16().
  void gemm_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) const;
  bool has_gemm_bf16() const { return onednn_gemm_bf16 != nullptr; }

  Library library = Library::openblas;
  std::string file;     // the file that was loaded: "libdnnl.so.2"
  std::string version;  // "oneDNN 2.6.3", "OpenBLAS 0.3.21"
  std::string kernels;  // OpenBLAS's kernels ("Cooperlake"), or "JIT" for oneDNN
  std::string why;      // how the library and its kernels were chosen, for tessera-devices

  // The library's entry points (filled by the loader).
  using OneDnnSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float,
                              const float*, std::int64_t, const float*, std::int64_t, float, float*,
                              std::int64_t);
  using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                              int, float, float*, int);
  using OneDnnGemmBf16 = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float,
                                 const std::uint16_t*, std::int64_t, const std::uint16_t*,
                                 std::int64_t, float, float*, std::int64_t);
  OneDnnSgemm onednn_sgemm = nullptr;
  OneDnnGemmBf16 onednn_gemm_bf16 = nullptr;  // optional: exported by oneDNN 1.x to 3.x
  CblasSgemm cblas_sgemm = nullptr;
  // The thread count of the library's runtime (OpenBLAS's, or OpenMP's for oneDNN): read and set
  // on the calling thread, or null where the library lacks them.
  int (*get_threads)() = nullptr;
  void (*set_threads)(int) = nullptr;
};

// Loads the GEMM library once per process (thread-safe). Throws ConfigError when TESSERA_CPU_GEMM
// is malformed; std::runtime_error saying what was tried and how to install it when none loads, or
// when TESSERA_CPU_GEMM names a library that does not load.
const Blas& blas();

// The OPENBLAS_CORETYPE that matches this CPU's features ("Cooperlake", "SkylakeX", "Haswell",
// "SandyBridge"), or empty when OpenBLAS's own detection should decide.
std::string core_type_for_this_cpu();

}  // namespace tessera::cpu
