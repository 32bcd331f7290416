#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz, -DTESSERA_FUZZ=ON) and runs each for a
# bounded time from its seed corpus (tests/fuzz/corpus/TARGET) and regression cases
# (tests/fuzz/regressions/TARGET). A target stops at its first finding (a crash, a sanitizer report,
# an uncaught exception, a timeout or a runaway allocation: tests/fuzz/README.md); the script runs
# every target, then exits 1 if any had one.
#   scripts/fuzz.sh [TARGET...]        targets: idx safetensors checkpoint env (default: all)
#   TESSERA_FUZZ_SECONDS=600 scripts/fuzz.sh idx      # longer
# Inputs that found new coverage accumulate in build-fuzz/corpus/TARGET across runs; a finding is
# written to build-fuzz/findings/TARGET/ and the command that replays it is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${TESSERA_FUZZ_SECONDS:-20}
targets=("$@")
((${#targets[@]})) || targets=(idx safetensors checkpoint env)

echo "== build (libFuzzer + ASan + UBSan, clang)"
CC=clang CXX=clang++ \
  TESSERA_EXTRA_PACKAGES="clang libclang-rt-14-dev llvm libc6-dbg ${TESSERA_EXTRA_PACKAGES:-}" \
  scripts/setup.sh build-fuzz -DCMAKE_BUILD_TYPE=Debug -DTESSERA_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++

# Reports are symbolized by llvm-symbolizer (package llvm). The suppressions are those of the
# ASan+UBSan test stage (scripts/test.sh says why use_tls=0).
export ASAN_SYMBOLIZER_PATH
ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer) ||
  { echo "llvm-symbolizer not found: apt-get install llvm" >&2; exit 1; }
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:use_tls=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"

failed=()
for t in "${targets[@]}"; do
  bin=build-fuzz/bin/tessera_fuzz_$t
  [ -x "$bin" ] ||
    { echo "scripts/fuzz.sh: no target '$t' (idx safetensors checkpoint env)" >&2; exit 2; }
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t log=build-fuzz/fuzz-$t.log
  rm -rf "$findings"
  mkdir -p "$work" "$findings"
  seeds=(tests/fuzz/corpus/"$t")
  [ -d tests/fuzz/regressions/"$t" ] && seeds+=(tests/fuzz/regressions/"$t")
  dict=()
  [ -f tests/fuzz/"$t".dict ] && dict=(-dict=tests/fuzz/"$t".dict)
  echo "== fuzz $t (${seconds} s; log: $log)"
  # -malloc_limit_mb: no input here needs more than a few MB, so one allocation of 256 MB is a
  # runaway (a size taken from a header); -rss_limit_mb catches the rest; -timeout: a hang.
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
       -artifact_prefix="$findings/" -print_final_stats=1 "${dict[@]}" "$work" "${seeds[@]}" \
       >"$log" 2>&1; then
    grep -E '^Done|stat::number_of_executed_units|stat::peak_rss_mb' "$log" | tr '\n' ' '
    echo
  else
    failed+=("$t")
    tail -n 60 "$log"
    for f in "$findings"/*; do
      [ -e "$f" ] || continue
      echo "FINDING ($t): reproducer $f"
      echo "  replay:          $bin $f"
      echo "  replay without clang (no allocation limit there): build/bin/tessera_fuzz_replay $t $f"
      echo "  keep as a test once fixed: cp $f tests/fuzz/regressions/$t/"
    done
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]} (above)" >&2
  exit 1
fi
echo "fuzz: no findings in ${targets[*]} (${seconds} s each)"
