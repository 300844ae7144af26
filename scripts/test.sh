#!/usr/bin/env bash
# Checks the C++ formatting (scripts/check_format.sh), the C++ include layers
# (scripts/check_includes.sh), function sizes (scripts/check_complexity.sh) and the Python
# import layers (scripts/check_imports.sh), builds Perseus, runs the C++ tests (plain, then
# under AddressSanitizer+UBSan, then ThreadSanitizer), the fuzzers, a -static-libstdc++ build
# under torch, installs the Python package and runs the Python tests.
# Usage: scripts/test.sh [--quick | --unit]
#   --quick  skips the sanitizer builds and the fuzzers
#   --unit   the fast tier: the C++ tests labelled `unit` (ctest -L unit: ranks as threads, no
#            forked jobs; a few minutes after the build) and the format check; no Python tests
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/python-env.sh
JOBS=${JOBS:-$(nproc)}
quick=0
unit=0
case "${1:-}" in
  --quick) quick=1 ;;
  --unit) quick=1; unit=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick | --unit]" >&2; exit 2 ;;
esac

# Each section prints the time the previous one took, and the total so far (CI's budget is
# 75 minutes for the whole run).
T0=$SECONDS
T_SECTION=$SECONDS
LAST_SECTION=""
section_done() {
  [ -n "$LAST_SECTION" ] && printf '==== %s: %d s (total %d s) ====\n' "$LAST_SECTION" \
    $((SECONDS - T_SECTION)) $((SECONDS - T0))
  T_SECTION=$SECONDS
}
section() { section_done; LAST_SECTION=$*; printf '\n==== %s ====\n' "$*"; }
trap 'section_done' EXIT

build_and_test() {  # dir, extra cmake args...; $CTEST_ARGS are passed to ctest
  local dir=$1; shift
  cmake -S "$ROOT" -B "$dir" -G Ninja -DPERSEUS_WITH_CUDA=AUTO "$@" >/dev/null
  ninja -C "$dir" -j "$JOBS"
  (cd "$dir" && ctest --output-on-failure -j 1 --timeout 180 ${CTEST_ARGS:-})
}

section "C++ formatting, include layers and function sizes, Python import layers"
scripts/check_format.sh
scripts/check_includes.sh
scripts/check_complexity.sh
scripts/check_imports.sh

# The test build compiles its GPU code for one architecture (CI has no GPU to run it on);
# the package that `pip install` builds below has the full default list.
section "C++ build and tests"
if [ $unit = 1 ]; then
  CTEST_ARGS="-L ^unit$" build_and_test build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES=90-real
  exit 0
fi
build_and_test build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90-real

if [ $quick = 0 ]; then
  section "C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  ASAN_OPTIONS=detect_leaks=1 build_and_test build/asan -DCMAKE_BUILD_TYPE=Debug \
    -DPERSEUS_SANITIZE=address,undefined -DPERSEUS_WITH_CUDA=OFF -DPERSEUS_BUILD_BENCH=OFF
  section "C++ tests under ThreadSanitizer"
  # ThreadSanitizer cannot follow a process that forks after it has started threads, nor
  # Open MPI's runtime: those tests (the C API's forked ranks, mpirun) run in the two builds
  # above and are left out here.
  TSAN_OPTIONS="halt_on_error=1" CTEST_ARGS="-E ^(CapiTest|TransportMpi)\\." build_and_test build/tsan \
    -DCMAKE_BUILD_TYPE=Debug -DPERSEUS_SANITIZE=thread -DPERSEUS_WITH_CUDA=OFF -DPERSEUS_BUILD_BENCH=OFF
fi

if [ $quick = 0 ]; then
  section "Fuzzing every network decoder (${FUZZ_SECONDS:-60} s each)"
  scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
fi

section "C++ runtime isolation: a -static-libstdc++ build under torch"
# Some toolchains link libstdc++ statically (tests/python/test_runtime_isolation.py says why
# that once crashed): build that way, then check the exports and run torch collectives on it.
STATIC=$ROOT/build/static-libstdcxx
cmake -S "$ROOT" -B "$STATIC" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERSEUS_BUILD_PYTHON=ON \
  -DPERSEUS_BUILD_TESTS=OFF -DPERSEUS_BUILD_BENCH=OFF -DPERSEUS_WITH_CUDA=OFF \
  -DCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++ -DCMAKE_MODULE_LINKER_FLAGS=-static-libstdc++ \
  -DPython_EXECUTABLE="$(command -v "$PYTHON")" >/dev/null
ninja -C "$STATIC" -j "$JOBS" perseus _core
(cd "$ROOT/tests/python" && PERSEUS_BUILD_DIR=$STATIC PERSEUS_EXPECT_STATIC_LIBSTDCXX=1 \
  $PYTHON -m pytest -q -p no:cacheprovider --timeout=300 test_runtime_isolation.py)

section "Python package and tests"
$PYTHON -m pip install -q --disable-pip-version-check --no-build-isolation "$ROOT"
cd "$ROOT/tests/python"
$PYTHON -m pytest -q -p no:cacheprovider --timeout=300 .
