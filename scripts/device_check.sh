#!/usr/bin/env bash
# One-call GPU verification on the device machine (docs/perf/gpu.md has the figures it gives).
#
# THE CALL (the lead makes it once; nothing else needs the device):
#   0. here, first: scripts/device_check.sh --prepare build-devcheck   (fills .devbin, ~25 MiB)
#      then:        scripts/device_check.sh --dry-run                  (must end "DRY RUN OK")
#   1. status: if `kinds` lists nvidia-h200-x2 use it (step (e) runs), else nvidia-h200.
#   2. run(command="bash scripts/device_check.sh", carry=[".devbin"],
#          kind="nvidia-h200-x2" (or "nvidia-h200"), timeout_s=420)
#   The command itself ends in < 5 min (a global deadline of DEADLINE_S=285 s bounds the steps,
#   each step also has its own `timeout`); timeout_s=420 leaves room for a stuck step's kill.
#   What comes back under $OUT (3 files): device_check.log (everything), summary.md (the
#   table, also printed last, so the reply's output_tail holds it), results.txt (RESULT lines).
#
# Steps, in order (each bounded by `timeout`, all logged to $OUT/device_check.log):
#   env  nvidia-smi, nvcc, torch/NCCL versions, GPU count; libnccl from torch's wheels.
#   py   import perseus._core (carried cp312 extension); if it fails, build _core+perseus there
#        from source with CMake (-j16) and say how long it took.
#   (a)  C++ GPU tests: gpu_kernels (every copy tuning), gpu_nccl (world 1), gpu_host_staged
#        (+ the staged split and chunk sizes at REDUCE_THREADS 1 and auto), engine_gpu_routing,
#        gpu_fusion_plan, gpu_fusion_bandwidth (every tuning, best per case), gpu_capi_latency
#        (world-1 phases through the C API), gpu_output_cache (reuse of library-owned
#        outputs), gpu_launch_watchdog (blocking NCCL launches; needs 2 GPUs), gpu_no_driver
#        (skips on a GPU).
#   (b)  bench/gpu/allreduce_world1.py: perseus.torch vs torch.distributed NCCL, world size 1,
#        4 B / 1 MiB / 256 MiB, medians; then the phases of one 4-byte call (b_w1_split).
#   (c)  perseusrun -np 2 bench/gpu/staged_two_ranks.py: 2 ranks on GPU 0 (host-staged path),
#        results checked, 4 B and 64 MiB, then the split at 64 MiB (D2H, CPU allreduce, H2D,
#        total); twice: PERSEUS_REDUCE_THREADS=1 and =0 (auto).
#   (d)  bench/gpu/sync_bn.py: SyncBatchNorm fwd+bwd vs BatchNorm2d, 32x256x56x56, 1 rank.
#   (e)  only with >= 2 GPUs: perseusrun -np 2 bench/gpu/two_gpu.py check (5 ops x 4 dtypes +
#        a process set), then ... bench (busbw vs torch NCCL, 1 MiB..1 GiB, 4 B latency),
#        then ... split (the phases of a 4-byte allreduce: as is, PERSEUS_SPIN_US=2000, and
#        with PERSEUS_TIMELINE into $OUT), then sync_bn.py on 2 ranks.
#   mc   compute-sanitizer memcheck of gpu_kernels_test, only if >= 70 s of the deadline is left.
#
# Modes:
#   --prepare BUILD_DIR  (here) copy the carried binaries from a CUDA=ON, MPI=OFF, Release build
#                        with -DPERSEUS_BUILD_PYTHON=ON for Python 3.12 into .devbin, and build a
#                        cp311 _core beside it for the rehearsal (see docs/perf/gpu.md).
#   --dry-run            (here, no GPU) every step with the same paths and launches: C++ tests
#                        run and skip, Python steps run their --cpu rehearsal (gloo, tiny sizes).
#   (none)               the device run; without a GPU every GPU step says "skipped: no GPU".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# NVLink multicast stays off in everything started from here (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
BIN=$ROOT/.devbin
MODE=device
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --dry-run) MODE=dry ;;
  "") ;;
  *) echo "usage: $0 [--dry-run | --prepare BUILD_DIR]" >&2; exit 2 ;;
esac

if [ $MODE = prepare ]; then
  B=${2:?"--prepare needs the build dir (CUDA=ON, MPI=OFF, PYTHON=ON for 3.12)"}
  rm -rf "$BIN" && mkdir -p "$BIN" || exit 1
  cp "$B"/tests/cpp/gpu_*_test "$B"/tests/cpp/engine_gpu_routing_test "$B"/libperseus.so \
    "$B"/_core.cpython-312-x86_64-linux-gnu.so "$BIN"/ || exit 1
  # The rehearsal's interpreter (3.11) gets its own _core over the same libperseus.so;
  # Python picks the one whose ABI tag matches.
  py=python3
  g++ -O2 -std=c++17 -fPIC -shared -fvisibility=hidden -Iinclude -Isrc \
    -I"$($py -c 'import pybind11; print(pybind11.get_include())')" $($py-config --includes) \
    src/python/*.cc -L"$BIN" -lperseus -o "$BIN/_core$($py-config --extension-suffix)" || exit 1
  strip --strip-unneeded "$BIN"/* 2>/dev/null
  du -sh "$BIN"; ls -la "$BIN"
  exit 0
fi

OUT=${OUT:-/tmp/perseus-device-check}
mkdir -p "$OUT"
LOG=$OUT/device_check.log
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
t_start=$(date +%s)
DEADLINE_S=${DEADLINE_S:-285}
left() { echo $(( DEADLINE_S - ($(date +%s) - t_start) )); }
# cap SECONDS: the step's own limit, cut to what the global deadline leaves (0: no time).
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $(( l > 0 ? l : 0 )); }
step_line() { echo "STEP $*" | tee -a "$LOG"; }
# run_step NAME LIMIT CMD...: runs CMD under timeout, output into the log; writes one STEP line.
run_step() {
  local name=$1 lim; lim=$(cap "$2"); shift 2
  if [ "$lim" -lt 5 ]; then step_line "$name skipped: deadline reached"; return 1; fi
  say "==== $name (limit ${lim}s): $*"
  local t0; t0=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$OUT/step.tmp" 2>&1
  local rc=$?
  cat "$OUT/step.tmp" >>"$LOG"
  local st=PASS; [ $rc = 0 ] || st="FAIL(rc=$rc$([ $rc = 124 ] && echo ' timeout'))"
  # gtest binaries: a PASS that only skipped must not read as a pass on the GPU machine.
  local gt=""
  grep -q "^\[==========\]" "$OUT/step.tmp" && gt=" ($(grep -c '^\[       OK \] .* ms)$' "$OUT/step.tmp") ok, $(grep -c '^\[  SKIPPED \] .* ms)$' "$OUT/step.tmp") skipped, $(grep -c '^\[  FAILED  \] .* ms)$' "$OUT/step.tmp") failed)"
  rm -f "$OUT/step.tmp"
  step_line "$name $st $(( $(date +%s) - t0 ))s$gt"
  [ $rc = 0 ] || { grep -E "CHECK FAILED|Error|error:|FAILED|what\(\)" "$LOG" | tail -5 | sed 's/^/  /' | tee -a "$LOG"; }
  return $rc
}

say "==== device check mode=$MODE ($(date -u +%Y-%m-%dT%H:%M:%SZ)) root=$ROOT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
(nvcc --version 2>&1 | grep release; uname -r; nproc; python3 --version) 2>&1 | tee -a "$LOG"
NGPU=$(timeout 60 python3 -c 'import torch; print(torch.cuda.device_count())' 2>>"$LOG" | tail -1)
NGPU=${NGPU:-0}
say "torch: $(python3 -c 'import torch; print(torch.__version__, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tail -1); GPUs: $NGPU"

# libnccl.so.2 (dlopen'ed by libperseus): the system's, else the one PyTorch's wheels carry.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
  nccl_dir=$(python3 -c 'import glob, site
for d in site.getsitepackages():
    for f in glob.glob(d + "/nvidia/**/libnccl.so.2", recursive=True):
        print(f.rsplit("/", 1)[0]); raise SystemExit' 2>/dev/null)
  [ -n "${nccl_dir:-}" ] && export LD_LIBRARY_PATH="$nccl_dir:${LD_LIBRARY_PATH:-}"
fi
say "libnccl: ${nccl_dir:-system}"
export LD_LIBRARY_PATH="$BIN:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$ROOT/python:$ROOT/bench/gpu:${PYTHONPATH:-}" PERSEUS_BUILD_DIR=$BIN
CPU=(); [ $MODE = dry ] && CPU=(--cpu)
RUN=(python3 -m perseus.runner -np 2)

# ---- py: the Python extension --------------------------------------------------------------
# FORCE_PY_BUILD=1 (rehearsal of the fallback; JOBS=2 here) skips the carried extension.
if [ -n "${FORCE_PY_BUILD:-}" ] || ! run_step "py import perseus._core" 60 python3 -c 'import perseus.torch as hvd, perseus._core as c; print("perseus", c.__file__, "cuda_built", hvd.cuda_built(), "nccl_built", hvd.nccl_built())'; then
  PB=$ROOT/build-device-py
  nccl_inc=${nccl_dir:+-DNCCL_INCLUDE_DIR=${nccl_dir%/lib}/include -DNCCL_LIBRARY=$nccl_dir/libnccl.so.2}
  t_build=$(date +%s)
  run_step "py build _core there" 170 bash -c "cmake -S . -B $PB -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPERSEUS_BUILD_PYTHON=ON -DPERSEUS_BUILD_TESTS=OFF -DPERSEUS_BUILD_BENCH=OFF \
    -DPERSEUS_WITH_MPI=OFF -DPERSEUS_WITH_CUDA=AUTO $nccl_inc \
    -Dpybind11_DIR=\$(python3 -m pybind11 --cmakedir) && ninja -C $PB -j${JOBS:-16} _core perseus" \
    && export PERSEUS_BUILD_DIR=$PB LD_LIBRARY_PATH="$PB:$LD_LIBRARY_PATH" \
    && run_step "py import (built there)" 30 python3 -c 'import perseus._core as c; print(c.__file__)'
  step_line "py build there took $(( $(date +%s) - t_build ))s"
fi

# ---- (a) C++ GPU tests ------------------------------------------------------------------------
for t in gpu_kernels_test gpu_nccl_test gpu_host_staged_test engine_gpu_routing_test \
         gpu_fusion_plan_test gpu_fusion_bandwidth_test gpu_capi_latency_test \
         gpu_output_cache_test gpu_launch_watchdog_test gpu_no_driver_test; do
  if [ -x "$BIN/$t" ]; then
    run_step "a $t" 40 "$BIN/$t" --gtest_color=no
  else
    step_line "a $t FAIL(missing from $BIN: run --prepare here)"
  fi
done

# ---- (b)..(e) Python steps ----------------------------------------------------------------------
gpu_or_dry() { [ $MODE = dry ] || [ "$NGPU" -ge "$1" ]; }
if gpu_or_dry 1; then
  run_step "b allreduce world1 vs torch nccl" 45 python3 bench/gpu/allreduce_world1.py "${CPU[@]}"
  # One reduction thread per rank, then auto (CPUs / local ranks, <= 8) at three chunk sizes
  # (PERSEUS_STAGED_CHUNK_BYTES; 8 MiB is the default).
  for cfg in "1 8388608" "0 4194304" "0 8388608" "0 16777216"; do
    set -- $cfg
    run_step "c 2 ranks 1 GPU host-staged REDUCE_THREADS=$1 CHUNK=$2" 45 \
      env PERSEUS_REDUCE_THREADS=$1 PERSEUS_STAGED_CHUNK_BYTES=$2 "${RUN[@]}" \
      python3 bench/gpu/staged_two_ranks.py "${CPU[@]}"
  done
  run_step "d sync_bn 1 rank" 35 python3 bench/gpu/sync_bn.py "${CPU[@]}"
else
  for s in "b allreduce world1" "c 2 ranks 1 GPU" "d sync_bn"; do step_line "$s skipped: no GPU"; done
fi
if gpu_or_dry 2; then
  run_step "e 2 GPUs check" 40 "${RUN[@]}" python3 bench/gpu/two_gpu.py check "${CPU[@]}"
  run_step "e 2 GPUs bench" 70 "${RUN[@]}" python3 bench/gpu/two_gpu.py bench "${CPU[@]}"
  # Where a 4-byte GPU allreduce's time goes at 2 ranks: as is, with a longer spin before any
  # thread blocks (are wake-ups the cost?), and with the engine's timeline (its spans come back
  # under $OUT as timeline.<rank>.json).
  run_step "e 2 GPUs split" 30 "${RUN[@]}" python3 bench/gpu/two_gpu.py split "${CPU[@]}"
  run_step "e 2 GPUs split SPIN_US=2000" 30 env PERSEUS_SPIN_US=2000 "${RUN[@]}" \
    python3 bench/gpu/two_gpu.py split --tag spin2000 "${CPU[@]}"
  run_step "e 2 GPUs split timeline" 30 env PERSEUS_TIMELINE="$OUT/timeline.json" "${RUN[@]}" \
    python3 bench/gpu/two_gpu.py split --tag timeline "${CPU[@]}"
  run_step "e sync_bn 2 ranks" 30 "${RUN[@]}" python3 bench/gpu/sync_bn.py "${CPU[@]}"
else
  step_line "e skipped: $NGPU GPU(s) visible, needs 2"
fi

# ---- mc: memcheck last, only with time to spare -------------------------------------------------
if [ "$NGPU" -ge 1 ] && command -v compute-sanitizer >/dev/null && [ "$(left)" -ge 70 ]; then
  run_step "mc memcheck gpu_kernels_test" 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BIN/gpu_kernels_test" --gtest_color=no
else
  step_line "mc memcheck skipped (no GPU, no compute-sanitizer or < 70 s left)"
fi

# ---- summary ----------------------------------------------------------------------------------------
# results.txt: the timing scripts' RESULT lines and the C++ tests' GPUBW/GPUSTAGED/GPUNCCL/GPUCAPI/GPUWATCHDOG
# lines.
(grep -o "RESULT .*" "$LOG"; grep -E "^GPU(BW|STAGED|NCCL|CAPI|WATCHDOG) " "$LOG") >"$OUT/results.txt"
elapsed=$(( $(date +%s) - t_start ))
step_line "total elapsed ${elapsed}s mode=$MODE gpus=$NGPU" >/dev/null
python3 bench/gpu/summarize.py "$LOG" >"$OUT/summary.md"
cat "$OUT/summary.md"
failed=$(grep -c "^STEP .* FAIL" "$LOG")
if [ $MODE = dry ]; then
  [ "$failed" = 0 ] && echo "DRY RUN OK (${elapsed}s)" || echo "DRY RUN: $failed step(s) failed"
fi
[ "$failed" = 0 ]
