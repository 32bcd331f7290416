#include "blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/log.h"

namespace tessera::cpu {

std::string core_type_for_this_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 register state.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "SandyBridge";
#endif
  return {};
}

namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS enums

// dnnl_version_t of oneDNN's C API (stable since oneDNN 1.0).
struct OneDnnVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
constexpr unsigned kOneDnnSequential = 1, kOneDnnOpenMp = 2;  // DNNL_RUNTIME_SEQ, _OMP

// Opens the first of |names| that loads; empty (with the dlerror()s in |errors|) when none does.
void* open_first(std::initializer_list<const char*> names, std::string& file, std::string& errors) {
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      file = name;
      return h;
    }
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
  }
  return nullptr;
}

// oneDNN, when it loads and its threads can be held to one per call (an OpenMP or sequential
// build); otherwise empty, with the reason in |error|.
bool load_onednn(Blas& b, std::string& error) {
  void* h = open_first({"libdnnl.so.2", "libdnnl.so.3", "libdnnl.so"}, b.file, error);
  if (!h) return false;
  const auto unusable = [&](std::string why) {
    dlclose(h);
    error = std::move(why);
    return false;
  };
  b.onednn_sgemm = reinterpret_cast<Blas::OneDnnSgemm>(dlsym(h, "dnnl_sgemm"));
  const auto version = reinterpret_cast<const OneDnnVersion* (*)()>(dlsym(h, "dnnl_version"));
  if (!b.onednn_sgemm || !version)
    return unusable(fmt::format("{} has no dnnl_sgemm or dnnl_version", b.file));
  const OneDnnVersion* v = version();
  if (v->cpu_runtime == kOneDnnOpenMp) {
    // dlsym on the library's handle also searches its dependencies: libgomp.
    b.get_threads = reinterpret_cast<int (*)()>(dlsym(h, "omp_get_max_threads"));
    b.set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "omp_set_num_threads"));
    if (!b.get_threads || !b.set_threads)
      return unusable(fmt::format("{} uses OpenMP but omp_set_num_threads was not found", b.file));
  } else if (v->cpu_runtime != kOneDnnSequential) {
    return unusable(fmt::format(
        "{} uses a CPU threading runtime (code {}) whose threads the plugin can not hold to one "
        "per call; an OpenMP or sequential build is needed",
        b.file, v->cpu_runtime));
  }
  b.onednn_gemm_bf16 = reinterpret_cast<Blas::OneDnnGemmBf16>(dlsym(h, "dnnl_gemm_bf16bf16f32"));
  b.library = Blas::Library::onednn;
  b.version = fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  b.kernels = "JIT";
  return true;
}

void load_openblas(Blas& b) {
  std::string core_from;
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"); user && *user) {
    core_from = "OPENBLAS_CORETYPE set by the user";
  } else if (std::string core = core_type_for_this_cpu(); !core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    core_from = "chosen from the CPU's features";
  } else {
    core_from = "OpenBLAS's own detection";
  }
  std::string errors;
  void* h = open_first({"libopenblas.so.0", "libopenblas.so"}, b.file, errors);
  if (!h)
    throw std::runtime_error(fmt::format(
        "OpenBLAS could not be loaded ({}); install it with apt-get install libopenblas0", errors));
  b.cblas_sgemm = reinterpret_cast<Blas::CblasSgemm>(dlsym(h, "cblas_sgemm"));
  if (!b.cblas_sgemm) throw std::runtime_error(fmt::format("{} has no cblas_sgemm", b.file));
  b.set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
  b.get_threads = reinterpret_cast<int (*)()>(dlsym(h, "openblas_get_num_threads"));
  using StrFn = char* (*)();
  b.kernels = "unknown kernels";
  if (auto core = reinterpret_cast<StrFn>(dlsym(h, "openblas_get_corename"))) b.kernels = core();
  b.version = "OpenBLAS";
  if (auto config = reinterpret_cast<StrFn>(dlsym(h, "openblas_get_config"))) {
    const std::string c = config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."
    b.version = c.substr(0, c.find(' ', c.find(' ') + 1));
  }
  b.library = Blas::Library::openblas;
  b.why += fmt::format("{}kernels {}", b.why.empty() ? "" : "; ", core_from);
}

Blas load() {
  Blas b;
  const char* env = std::getenv("TESSERA_CPU_GEMM");
  const std::string choice = env && *env ? env : "auto";
  if (choice != "auto" && choice != "onednn" && choice != "openblas")
    throw ConfigError(
        fmt::format("TESSERA_CPU_GEMM='{}' is not a GEMM library: give onednn, openblas or auto "
                    "(oneDNN when it is installed, else OpenBLAS)",
                    choice));
  if (choice != "openblas") {
    std::string error;
    if (load_onednn(b, error)) {
      b.why = choice == "auto" ? "auto: oneDNN is installed" : "TESSERA_CPU_GEMM=onednn";
    } else if (choice == "onednn") {
      throw std::runtime_error(fmt::format(
          "TESSERA_CPU_GEMM=onednn, but oneDNN could not be used ({}); install it with apt-get "
          "install libdnnl2, or unset TESSERA_CPU_GEMM",
          error));
    } else {
      b = Blas{};
      b.why = fmt::format("auto: oneDNN not usable ({})", error);
      log().debug("cpu: oneDNN not used: {}", error);
    }
  } else {
    b.why = "TESSERA_CPU_GEMM=openblas";
  }
  if (b.library == Blas::Library::openblas) load_openblas(b);
  log().debug("cpu: GEMM by {} ({}, {}): {}", b.version, b.file, b.kernels, b.why);
  return b;  // the library stays loaded for the life of the process
}

}  // namespace

void Blas::sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) const {
  lda = std::max<std::int64_t>(lda, 1);
  ldb = std::max<std::int64_t>(ldb, 1);
  ldc = std::max<std::int64_t>(ldc, 1);
  if (library == Library::onednn) {
    // OpenMP's thread count is a per-thread setting: one thread for this call, then the calling
    // thread's own setting back (it may be an application thread with OpenMP work of its own).
    const int before = get_threads ? get_threads() : 1;
    if (before != 1) set_threads(1);
    const int status =
        onednn_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    if (before != 1) set_threads(before);
    if (status != 0)
      throw BackendError(fmt::format("oneDNN's dnnl_sgemm failed (status {}) on a {}x{}x{} GEMM",
                                     status, m, n, k));
    return;
  }
  // OpenBLAS's thread count is process-wide: keep it at one if something else in the process (an
  // application using OpenBLAS itself, a peer benchmark) raised it. Cheap when nothing changed.
  if (get_threads && set_threads && get_threads() != 1) set_threads(1);
  cblas_sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void Blas::gemm_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                     const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
                     std::int64_t ldb, float beta, float* c, std::int64_t ldc) const {
  const int before = get_threads ? get_threads() : 1;
  if (before != 1) set_threads(1);
  const int status = onednn_gemm_bf16(
      ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, std::max<std::int64_t>(lda, 1), b,
      std::max<std::int64_t>(ldb, 1), beta, c, std::max<std::int64_t>(ldc, 1));
  if (before != 1) set_threads(before);
  if (status != 0)
    throw BackendError(fmt::format(
        "oneDNN's dnnl_gemm_bf16bf16f32 failed (status {}) on a {}x{}x{} GEMM", status, m, n, k));
}

const Blas& blas() {
  static const Blas b = load();
  return b;
}

}  // namespace tessera::cpu
