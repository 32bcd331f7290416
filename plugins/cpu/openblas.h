// OpenBLAS, loaded at run time with the right kernels for this CPU.
//
// OpenBLAS picks its kernels when it is loaded. Under many hypervisors its CPU detection falls back
// to "Prescott" (SSE3) although the CPU has AVX2 or AVX-512, which makes SGEMM several times
// slower. The CPU plugin therefore does not link OpenBLAS: it reads the CPU's features, sets
// OPENBLAS_CORETYPE (unless the user set it) and only then dlopens the library.
//
// OpenBLAS runs single-threaded: the plugin cuts each GEMM into blocks for its own thread pool.
// OpenBLAS's threads would otherwise spin and yield beside the pool's between calls (a quarter of
// a training step's time on two cores went to sched_yield), and its small-GEMM threading costs
// more than the work at batch 128.
#pragma once

#include <string>

namespace tessera::cpu {

struct Blas {
  // cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
  void (*sgemm)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                float*, int) = nullptr;
  // Sets / reads OpenBLAS's thread count; null when the library lacks them.
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;
  std::string library;    // the file that was loaded
  std::string version;    // "OpenBLAS 0.3.21"
  std::string core;       // the kernels OpenBLAS runs: "SkylakeX"
  std::string core_from;  // "detected from CPU features", "OPENBLAS_CORETYPE set by the user", ...
};

inline constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// Loads OpenBLAS once per process (thread-safe) and makes it single-threaded. Throws
// std::runtime_error naming the libraries tried when none loads.
const Blas& blas();

// Makes OpenBLAS single-threaded again if something else in the process (a peer benchmark, an
// application using OpenBLAS itself) raised its thread count. Call before running GEMMs from the
// pool; cheap when nothing changed.
void keep_blas_single_threaded(const Blas& b);

// The OPENBLAS_CORETYPE that matches this CPU's features ("Cooperlake", "SkylakeX", "Haswell",
// "SandyBridge"),
// or empty when OpenBLAS's own detection should decide.
std::string core_type_for_this_cpu();

}  // namespace tessera::cpu
