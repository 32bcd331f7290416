#!/usr/bin/env bash
# Set up and pass the tests: a Release build with warnings as errors, then the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer (skip that with TESSERA_SKIP_SANITIZERS=1), then
# every fuzz target for TESSERA_FUZZ_SECONDS (30) each (scripts/fuzz.sh; skip with
# TESSERA_SKIP_FUZZ=1).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== build (Release, -Werror)"
# python3-torch: the PyTorch peer of tessera-bench's fit case test. clang and libclang-rt-14-dev:
# the fuzz stage's libFuzzer build. llvm (llvm-symbolizer) and libc6-dbg (glibc's symbols):
# without both, sanitizer reports show glibc's frames as library+offset, and the suppressions by
# function name in tests/lsan.supp (_dlerror_run, ...) match nothing on a fresh Debian. iproute2:
# the tests that run one MPI job across two network namespaces (tests/dist/two_hosts).
TESSERA_EXTRA_PACKAGES="python3-venv python3-torch clang libclang-rt-14-dev llvm libc6-dbg iproute2" scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON -DTESSERA_REQUIRE_GPU_PLUGINS=ON

# The checkpoint test reads a checkpoint with Python's safetensors library (PyPI, test-only): a
# virtual environment in .venv-test, made once.
if ! .venv-test/bin/python -c "import safetensors, numpy" 2>/dev/null; then
  echo "== test Python (.venv-test: safetensors, numpy)"
  python3 -m venv .venv-test
  .venv-test/bin/pip install -q safetensors numpy
fi
export TESSERA_TEST_PYTHON="$PWD/.venv-test/bin/python"

echo "== tests (Release)"
ctest --test-dir build --output-on-failure --parallel "$jobs"

if [ "${TESSERA_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  # TESSERA_EMBED_PTX=OFF: the GPU plugins' PTX modules are data for NVIDIA GPUs, which this
  # tree's devices never run; the Release tree builds and checks them.
  scripts/setup.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DTESSERA_WERROR=ON -DTESSERA_SANITIZE=address,undefined \
    -DTESSERA_REQUIRE_GPU_PLUGINS=ON -DTESSERA_EMBED_PTX=OFF
  echo "== tests (ASan + UBSan)"
  # use_tls=0: GCC 12's LeakSanitizer (glibc 2.36) crashes at exit while it walks the dynamic
  # thread-local storage of a dlopen'ed library that pool threads have touched (oneDNN's). Not
  # scanning thread-local storage can only add leak reports, never hide one; the few it adds
  # (glibc's dlerror() state, libgomp's per-thread settings) are suppressed in tests/lsan.supp.
  symbolizer=$(command -v llvm-symbolizer) ||
    { echo "llvm-symbolizer not found: apt-get install llvm" >&2; exit 1; }
  # --label-exclude: "slow", whole-epoch runs whose code the shorter tests already take through the
  # sanitizers, and "gpu_variant", the conformance suite again with GPU launch settings forced
  # (tests/conformance/CMakeLists.txt); the Release stage runs both (68 s of the sanitizer stage's
  # 536 s of tests on a 2-core machine).
  # use_sigaltstack=0: GCC 12's ASan CHECK-fails at the exit of some threads ("unable to unmap"
  # in UnsetAlternateSignalStack: the tests whose ranks are threads, tests/train); without its own
  # alternate signal stack ASan loses only its report of a stack overflow.
  ASAN_SYMBOLIZER_PATH=$symbolizer LSAN_SYMBOLIZER_PATH=$symbolizer \
  ASAN_OPTIONS=detect_leaks=1:use_sigaltstack=0 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:use_tls=0" \
    ctest --test-dir build-asan --output-on-failure --parallel "$jobs" --label-exclude 'slow|gpu_variant'
fi

if [ "${TESSERA_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh
fi
