#include "openblas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

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

Blas load() {
  Blas b;
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"); user && *user) {
    b.core_from = "OPENBLAS_CORETYPE set by the user";
  } else if (std::string core = core_type_for_this_cpu(); !core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    b.core_from = "chosen from the CPU's features";
  } else {
    b.core_from = "OpenBLAS's own detection";
  }
  void* handle = nullptr;
  std::string errors;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      b.library = name;
      break;
    }
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
  }
  if (!handle)
    throw std::runtime_error(fmt::format(
        "OpenBLAS could not be loaded ({}); install it with apt-get install libopenblas0", errors));
  b.sgemm = reinterpret_cast<decltype(b.sgemm)>(dlsym(handle, "cblas_sgemm"));
  if (!b.sgemm) throw std::runtime_error(fmt::format("{} has no cblas_sgemm", b.library));
  b.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
  b.get_num_threads = reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_num_threads"));
  keep_blas_single_threaded(b);
  using StrFn = char* (*)();
  if (auto core = reinterpret_cast<StrFn>(dlsym(handle, "openblas_get_corename"))) b.core = core();
  if (auto config = reinterpret_cast<StrFn>(dlsym(handle, "openblas_get_config"))) {
    const std::string c = config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."
    const auto space = c.find(' ', c.find(' ') + 1);
    b.version = c.substr(0, space);
  }
  log().debug("cpu: loaded {} ({}), kernels {} ({})", b.library, b.version, b.core, b.core_from);
  return b;  // the library stays loaded for the life of the process
}

}  // namespace

void keep_blas_single_threaded(const Blas& b) {
  if (b.set_num_threads && b.get_num_threads && b.get_num_threads() != 1) b.set_num_threads(1);
}

const Blas& blas() {
  static const Blas b = load();
  return b;
}

}  // namespace tessera::cpu
