#!/usr/bin/env bash
# GPU verification on the device machine, through the install a user makes there: its first
# step is `pip install .` in the machine's own environment (its compiler, its PyTorch, its
# NCCL), and every later step uses that install. docs/perf/gpu.md has the figures it gives.
#
# THE CALL (nothing else needs the device):
#   0. here, once per checkout: scripts/device_check.sh --prepare   (copies GoogleTest's
#      sources into .devdeps/: the device image has no libgtest; ~4 MiB)
#      then, to rehearse every step on CPU tensors: scripts/device_check.sh --dry-run
#   1. status: if `kinds` lists nvidia-h200-x2 use it (the 2-GPU steps run), else nvidia-h200.
#   2. run(command="bash scripts/device_check.sh", carry=[".devdeps"], kind=..., timeout_s=600)
#   A global deadline (DEADLINE_S, 540 s) bounds the steps; each step has its own `timeout`.
#   What comes back under $OUT: device_check.log (everything), summary.md (the table, also
#   printed last, so the reply's output_tail holds it), results.txt (RESULT lines).
#
# Steps, in order:
#   env      nvidia-smi, the compiler the environment sets (CXX), torch, NCCL, GPU count.
#   install  python3 -m pip install --no-build-isolation . (offline: the build tools come from
#            the machine), timed; then perseusrun --check-build.
#   first    the first collectives on that install: world size 1 and perseusrun -np 2, CPU and
#            CUDA tensors, every dtype and the error paths (tests/python/test_runtime_isolation.py,
#            which also checks the libraries' exports), then tests/python/test_torch.py (CUDA join
#            included) and tests/python/test_horovod_conformance.py.
#   td       the torch.distributed backend (on either route: a c10d Backend, or a ProcessGroup
#            where torch cannot build a Python Backend): its CUDA tests with a DDP step, and the
#            per-call cost of dist.all_reduce at world size 1 against a no-op Python group and
#            NCCL, and its split into stages (bench/torch_distributed/percall_split.py).
#   quiet    a clean exit after GPU collectives logs no warning (no communicator abort).
#   a        the C++ GPU tests and the GPU benchmarks (bench/gpu/*_bench.cc), built there by
#            the same toolchain (CMake, GoogleTest from .devdeps).
#   b..d     bench/gpu: allreduce at world size 1 vs torch NCCL; 2 ranks on one GPU through the
#            host-staged path; SyncBatchNorm fwd+bwd vs BatchNorm2d.
#   r        Horovod's synthetic benchmark pattern: ResNet-50, batch 64, torch alone vs
#            DistributedOptimizer at world size 1, with and without fp16 compression, and torch
#            DDP on backend nccl vs backend perseus; each mode in its own process, the five
#            alternated twice.
#   e        only with >= 2 GPUs: two_gpu.py check / bench / split, sync_bn on 2 ranks.
#   mc       compute-sanitizer memcheck of gpu_kernels_test, when time is left.
#
# Modes:
#   --prepare   (here) fill .devdeps
#   --dry-run   (here, no GPU) every step with the same commands; Python steps run --cpu.
#   (none)      the device run; without a GPU every GPU step says "skipped: no GPU".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# NVLink multicast stays off in everything started from here (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DEPS=$ROOT/.devdeps
MODE=device
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --dry-run) MODE=dry ;;
  "") ;;
  *) echo "usage: $0 [--dry-run | --prepare]" >&2; exit 2 ;;
esac

if [ $MODE = prepare ]; then
  rm -rf "$DEPS" && mkdir -p "$DEPS" && cp -r /usr/src/googletest "$DEPS/googletest" || exit 1
  du -sh "$DEPS"
  exit 0
fi

OUT=${OUT:-/tmp/perseus-device-check}
mkdir -p "$OUT"
LOG=$OUT/device_check.log
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
t_start=$(date +%s)
DEADLINE_S=${DEADLINE_S:-560}
left() { echo $(( DEADLINE_S - ($(date +%s) - t_start) )); }
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
  # gtest and pytest: a PASS that only skipped must not read as a pass on the GPU machine.
  local detail=""
  grep -q "^\[==========\]" "$OUT/step.tmp" && detail=" ($(grep -c '^\[       OK \] .* ms)$' "$OUT/step.tmp") ok, $(grep -c '^\[  SKIPPED \] .* ms)$' "$OUT/step.tmp") skipped, $(grep -c '^\[  FAILED  \] .* ms)$' "$OUT/step.tmp") failed)"
  local py; py=$(grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$" "$OUT/step.tmp" | tail -1)
  [ -n "$py" ] && detail=" ($py)"
  step_line "$name $st $(( $(date +%s) - t0 ))s$detail"
  [ $rc = 0 ] || { grep -E "CHECK FAILED|Error|error:|FAILED|what\(\)" "$OUT/step.tmp" | tail -5 | sed 's/^/  /' | tee -a "$LOG"; }
  rm -f "$OUT/step.tmp"
  return $rc
}

say "==== device check mode=$MODE ($(date -u +%Y-%m-%dT%H:%M:%SZ)) root=$ROOT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
(echo "CXX=${CXX:-} ($(${CXX:-c++} --version 2>&1 | head -1))"; nvcc --version 2>&1 | grep release
 uname -r; nproc; $PY --version) 2>&1 | tee -a "$LOG"
NGPU=$(timeout 60 $PY -c 'import torch; print(torch.cuda.device_count())' 2>>"$LOG" | tail -1)
NGPU=${NGPU:-0}
say "torch: $($PY -c 'import torch; print(torch.__version__, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tail -1); GPUs: $NGPU"
CPU=(); [ $MODE = dry ] && CPU=(--cpu)
RUN=($PY -m perseus.runner -np 2)
# The tests and benchmarks must import the installed package, not the source tree.
unset PERSEUS_BUILD_DIR
export PYTHONPATH="$ROOT/bench/gpu"
cd /tmp || exit 1

# summarize: the results file and the summary table, last in the output; its status is the run's.
summarize() {
(grep -o "RESULT .*" "$LOG"; grep -E "^GPU(BW|STAGED|NCCL|CAPI|WATCHDOG) " "$LOG") >"$OUT/results.txt"
elapsed=$(( $(date +%s) - t_start ))
step_line "total elapsed ${elapsed}s mode=$MODE gpus=$NGPU" >/dev/null
$PY "$ROOT/bench/gpu/summarize.py" "$LOG" >"$OUT/summary.md"
cat "$OUT/summary.md"
failed=$(grep -c "^STEP .* FAIL" "$LOG")
if [ $MODE = dry ]; then
  [ "$failed" = 0 ] && echo "DRY RUN OK (${elapsed}s)" || echo "DRY RUN: $failed step(s) failed"
fi
[ "$failed" = 0 ]
}

# ---- install: what a user runs ------------------------------------------------------------------
if ! run_step "install pip install --no-build-isolation ." 300 \
    $PY -m pip install --no-build-isolation --disable-pip-version-check -v "$ROOT"; then
  say "the user's install failed: nothing below can run"
  summarize
  exit 1
fi
grep -E "perseus: |CUDA architectures|Building CUDA|libstdc|warning" "$LOG" | grep -v "^STEP" | tail -8 >&2
run_step "install perseusrun --check-build" 60 $PY -m perseus.runner --check-build
# How the toolchain linked the C++ runtime into the installed libraries (no libstdc++.so.6
# among them: a static copy, the case that once crashed).
say "installed: $($PY -c 'import perseus, os; print(os.path.dirname(perseus.__file__))' 2>&1)"
for f in $($PY -c 'import perseus, glob, os; d = os.path.dirname(perseus.__file__); print(" ".join(glob.glob(d + "/*.so")))' 2>/dev/null); do
  say "  $(basename "$f") NEEDED: $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
done

# ---- first: the first collectives on that install ---------------------------------------------------
FIRST='import torch, perseus.torch as hvd
hvd.init()
x = hvd.allreduce(torch.ones(4), name="cpu")
assert x.tolist() == [1.0] * 4, x
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    y = hvd.allreduce(torch.ones(4, device="cuda"), name="cuda")
    assert y.cpu().tolist() == [1.0] * 4, y
print("PASS first collective rank", hvd.rank(), "of", hvd.size())
hvd.shutdown()'
run_step "first world size 1" 60 $PY -c "$FIRST"
run_step "first perseusrun -np 2" 60 "${RUN[@]}" $PY -c "$FIRST"
run_step "first test_runtime_isolation.py (exports, dtypes, errors)" 120 \
  $PY -m pytest -q -p no:cacheprovider --timeout=100 "$ROOT/tests/python/test_runtime_isolation.py"
run_step "first test_torch.py on the install" 150 \
  $PY -m pytest -q -p no:cacheprovider --timeout=100 "$ROOT/tests/python/test_torch.py"
run_step "first test_horovod_conformance.py on the install" 150 \
  $PY -m pytest -q -p no:cacheprovider --timeout=100 "$ROOT/tests/python/test_horovod_conformance.py"
run_step "first test_elastic_gpu.py on the install (reset rebuilds GPU state)" 300 \
  $PY -m pytest -q -p no:cacheprovider --timeout=260 "$ROOT/tests/python/elastic/test_elastic_gpu.py"

# ---- td: the torch.distributed backend "perseus" on the install ---------------------------------------
run_step "td test_backend_cuda.py (CUDA ops, Work.wait on the stream, DDP step)" 240 \
  $PY -m pytest -q -p no:cacheprovider --timeout=180 "$ROOT/tests/python/torch_distributed/test_backend_cuda.py"
run_step "td per-call dist.all_reduce 4 B, world size 1: noop floor, perseus, nccl" 120 \
  $PY "$ROOT/bench/gpu/dist_percall.py" "${CPU[@]}"
if [ $MODE = dry ] || [ "$NGPU" -ge 1 ]; then
  SPLIT_DEVICE=(--device cuda); [ $MODE = dry ] && SPLIT_DEVICE=()
  run_step "td per-call split of perseus's dist.all_reduce 4 B, world size 1 (its stages)" 60 \
    $PY "$ROOT/bench/torch_distributed/percall_split.py" --rounds 5 --calls 1000 "${SPLIT_DEVICE[@]}"
fi

# ---- quiet: a clean exit logs nothing ----------------------------------------------------------------
if [ $MODE = dry ] || [ "$NGPU" -ge 1 ]; then
  cat >"$OUT/quiet.py" <<'PYEOF'
import torch, perseus.torch as hvd
hvd.init()
dev = "cuda" if torch.cuda.is_available() else "cpu"
if dev == "cuda":
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
for i in range(3):
    hvd.allreduce(torch.ones(1 << 20, device=dev), name="q%d" % i)
    hvd.allgather(torch.ones(4, device=dev), name="g%d" % i)
hvd.shutdown()
PYEOF
  # Perseus's warnings read "[perseus <rank> <subsystem> W] ...".
  run_step "quiet exit after GPU collectives" 60 bash -c "${RUN[*]} $PY $OUT/quiet.py >$OUT/quiet.out 2>&1
    rc=\$?; cat $OUT/quiet.out
    if grep -E '\[perseus ([0-9]+ )?[a-z]+ [WE]\]|aborting the NCCL' $OUT/quiet.out; then
      echo 'a clean exit logged the lines above'; exit 1
    fi
    exit \$rc"
fi

# ---- a: C++ GPU tests and GPU benchmarks, built there -------------------------------------------------
# (DRY_SKIP_CPP=1 skips it in a rehearsal on a small machine, where it is a long build.)
if { [ $MODE = dry ] && [ -z "${DRY_SKIP_CPP:-}" ]; } || [ "$NGPU" -ge 1 ]; then
  TB=$ROOT/build/device-tests
  targets=$(cd "$ROOT/tests/cpp" && ls gpu_*_test.cc engine_gpu_routing_test.cc cuda_error_text_test.cc 2>/dev/null | sed 's/\.cc$//' | tr '\n' ' ')
  benches=$(cd "$ROOT/bench/gpu" && ls gpu_*_bench.cc 2>/dev/null | sed 's/\.cc$//' | tr '\n' ' ')
  gtest=(); [ -d "$DEPS/googletest" ] && gtest=(-DPERSEUS_GTEST_SOURCE_DIR="$DEPS/googletest")
  if run_step "a build C++ GPU tests and benchmarks there" 240 bash -c "cmake -S '$ROOT' -B '$TB' -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DPERSEUS_WITH_MPI=OFF \
      ${gtest[*]} >/dev/null && ninja -C '$TB' -j\$(nproc) $targets $benches"; then
    for t in $targets; do
      run_step "a $t" 60 "$TB/tests/cpp/$t" --gtest_color=no
    done
    # The benchmarks print the GPU figures (GPUNCCL, GPUSTAGED, GPUCAPI lines); 77 = no GPU.
    for b in $benches; do
      run_step "a $b" 90 "$TB/bench/$b"
    done
  fi
else
  step_line "a skipped: no GPU"
fi

# ---- b..d, r: timing scripts on the install --------------------------------------------------------
gpu_or_dry() { [ $MODE = dry ] || [ "$NGPU" -ge "$1" ]; }
if gpu_or_dry 1; then
  run_step "b allreduce world1 vs torch nccl" 45 $PY "$ROOT/bench/gpu/allreduce_world1.py" "${CPU[@]}"
  for cfg in "1 8388608" "0 8388608"; do
    set -- $cfg
    run_step "c 2 ranks 1 GPU host-staged REDUCE_THREADS=$1 CHUNK=$2" 45 \
      env PERSEUS_REDUCE_THREADS=$1 PERSEUS_STAGED_CHUNK_BYTES=$2 "${RUN[@]}" \
      $PY "$ROOT/bench/gpu/staged_two_ranks.py" "${CPU[@]}"
  done
  run_step "d sync_bn 1 rank" 35 $PY "$ROOT/bench/gpu/sync_bn.py" "${CPU[@]}"
  for round in 1 2; do
    for mode in plain perseus fp16 ddp-nccl ddp-perseus; do
      run_step "r resnet50 $mode round $round" 90 $PY "$ROOT/bench/gpu/resnet50_synthetic.py" \
        --mode $mode "${CPU[@]}"
    done
  done
else
  for s in "b allreduce world1" "c 2 ranks 1 GPU" "d sync_bn" "r resnet50"; do step_line "$s skipped: no GPU"; done
fi
if gpu_or_dry 2; then
  run_step "e 2 GPUs check" 40 "${RUN[@]}" $PY "$ROOT/bench/gpu/two_gpu.py" check "${CPU[@]}"
  run_step "e 2 GPUs bench" 70 "${RUN[@]}" $PY "$ROOT/bench/gpu/two_gpu.py" bench "${CPU[@]}"
  run_step "e 2 GPUs split" 30 "${RUN[@]}" $PY "$ROOT/bench/gpu/two_gpu.py" split "${CPU[@]}"
  run_step "e sync_bn 2 ranks" 30 "${RUN[@]}" $PY "$ROOT/bench/gpu/sync_bn.py" "${CPU[@]}"
else
  step_line "e skipped: $NGPU GPU(s) visible, needs 2"
fi

# ---- mc: memcheck last, only with time to spare -------------------------------------------------
if [ "$NGPU" -ge 1 ] && command -v compute-sanitizer >/dev/null && [ -x "${TB:-}/tests/cpp/gpu_kernels_test" ] \
    && [ "$(left)" -ge 70 ]; then
  run_step "mc memcheck gpu_kernels_test" 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$TB/tests/cpp/gpu_kernels_test" --gtest_color=no
else
  step_line "mc memcheck skipped (no GPU, no compute-sanitizer, no test binary or < 70 s left)"
fi

# ---- summary ----------------------------------------------------------------------------------------
summarize
