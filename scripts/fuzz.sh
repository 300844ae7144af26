#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz (each decoder of bytes that arrive from the
# network) with clang + ASan/UBSan and runs each for a bounded time.
# Usage: scripts/fuzz.sh [seconds per target, default 60] [target name filter]
# Needs clang and its fuzzer runtime; on Debian 12: apt-get install clang libclang-rt-14-dev
# (libclang-rt-dev for other clang versions). Corpora are kept in build-fuzz/corpus/<target>
# so later runs start where earlier ones stopped. Exit status: non-zero if any target found a
# crash, a leak, an out-of-memory or a timeout; the reproducer is build-fuzz/crash-<target>-*.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_PER_TARGET=${1:-60}
FILTER=${2:-}
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${JOBS:-2}
CXX_BIN=${FUZZ_CXX:-$(command -v clang++ || true)}
CC_BIN=${FUZZ_CC:-$(command -v clang || true)}
if [ -z "$CXX_BIN" ] || [ -z "$CC_BIN" ]; then
  echo "fuzz.sh: clang is not installed (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    | "$CXX_BIN" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "fuzz.sh: $CXX_BIN cannot link -fsanitize=fuzzer; install the clang runtime" \
       "(apt-get install libclang-rt-14-dev, or the one matching your clang)" >&2
  exit 2
fi

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" -DPERSEUS_BUILD_FUZZERS=ON \
  -DPERSEUS_BUILD_TESTS=OFF -DPERSEUS_BUILD_BENCH=OFF -DPERSEUS_BUILD_PYTHON=OFF \
  -DPERSEUS_WITH_CUDA=OFF -DPERSEUS_WITH_MPI=OFF >/dev/null
targets=()
for src in tests/fuzz/fuzz_*.cc; do
  name=$(basename "$src" .cc)
  [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && continue
  targets+=("$name")
done
ninja -C "$BUILD" -j "$JOBS" "${targets[@]}"

failed=()
for name in "${targets[@]}"; do
  corpus="$BUILD/corpus/$name"
  mkdir -p "$corpus"
  echo "==== $name: ${SECONDS_PER_TARGET}s ===="
  # -rss_limit_mb / -malloc_limit_mb: an allocation sized by a length field is a finding.
  if ! "$BUILD/tests/fuzz/$name" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
      -rss_limit_mb=1024 -malloc_limit_mb=256 -timeout=10 -max_len=4096 \
      -artifact_prefix="$BUILD/crash-$name-" -print_final_stats=1 2>"$BUILD/$name.log"; then
    failed+=("$name")
    tail -40 "$BUILD/$name.log"
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$BUILD/$name.log" || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (reproducers: $BUILD/crash-*)" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, ${SECONDS_PER_TARGET}s each, no findings"
