#!/usr/bin/env bash
# The benchmarks that need a quiet many-core host, run on the device machine (16 cores)
# through the user's install, in parts (PARTS, space-separated, in this order):
#   gpu       the torch.distributed backend on the GPU: test_backend_cuda.py, the per-call cost
#             of dist.all_reduce (bench/gpu/dist_percall.py), ResNet-50 DDP on backend nccl
#             against backend perseus, alternated (bench/gpu/resnet50_synthetic.py);
#   smallops  small collectives from Python against mpi4py and Gloo, 2 and 4 ranks; then one
#             call's stages at 2 ranks (bench/small_ops/stages.py, the C entries against the
#             Python functions they stand for and mpi4py);
#   td        bench/torch_distributed/run.py (TD_ARGS, default --rounds 3 --fsdp-ranks 2,4): DDP
#             at 2 CPU ranks and FSDP2 at 2 and 4, perseus against Gloo and the no-communication
#             floor; and percall.py at 2 CPU ranks;
#   fsdpprobe FSDP2 at 4 CPU ranks, each rank's step, waiting and page faults by thread, under
#             glibc's defaults and with its heap thresholds fixed, beside Gloo and the floor
#             (bench/probes/fsdp_per_rank.sh), with the host's transparent huge page settings;
#   torchrun  torchrun's start-up spread, 30 starts;
#   diag      what the stall diagnosis and straggler accounting cost at 2 ranks (DIAG_PAIRS
#             pairs, default 10; bench/probes/diagnosis_cost.sh);
#   ab        the GPU per-call figures under each setting in AB (space-separated VAR=VALUE words,
#             default "PERSEUS_CALLER_CYCLES=0 PERSEUS_CALLER_CYCLES=1"), alternated AB_ROUNDS
#             times (default 3): dist_percall.py, percall_split.py --device cuda and
#             allreduce_world1.py, each in its own process;
#   capi      the C API's world-size-1 CUDA allreduce from C++ (bench/gpu/gpu_capi_phases_bench,
#             built there with GoogleTest from .devdeps; carry it): phase by phase, and back to
#             back beside the CUDA calls it cannot avoid (CAPI_RUNS runs, default 3);
#   profile   where the CPU time of the world-size-1 CUDA allreduce goes, sampled (bench/probes/
#             sampler.c): the C API loop of part capi (run capi first) and dist.all_reduce on
#             backend perseus (PROFILE_CALLS, default 100000 calls a round of the C API loop);
#   soak      the elastic chaos soak, for the time left.
# GPU correctness as a whole comes from scripts/device_check.sh, not from here.
#
# THE CALL:
#   here, once: put an mpi4py wheel for the device's Python into .whl/ (pip download mpi4py
#   --only-binary :all: --python-version 3.12 -d .whl); then
#   run(command="PARTS='gpu td soak' bash scripts/device_bench.sh", carry=[".whl"], timeout_s=600)
#   A second call on the still-warm machine skips the install when perseus imports already.
# What comes back under $OUT: device_bench.log and each part's report (torch_distributed.md, or
# the name TD_ARGS gives with --out; percall.txt, resnet50.txt, small_ops.md/.jsonl,
# small_ops_stages.txt, torchrun_start.md, diagnosis_cost.md, chaos_soak.md, soak_raw.tgz with
# each soak's log).
# Environment: DEADLINE_S (default 560) bounds the whole call; SOAK_SEED (default 4811);
# RESNET_ROUNDS (default 2); TD_ARGS; TD_LIMIT_S (the td bench's limit; default: what is left
# but 100 s for what follows it; the bench rewrites its report after every round, so a cut run
# keeps the rounds it finished);
# SMALLOPS_REPS (default 3, about 60 s each).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/perseus-device-bench}
mkdir -p "$OUT"
LOG=$OUT/device_bench.log
t_start=$(date +%s)
DEADLINE_S=${DEADLINE_S:-560}
left() { echo $(( DEADLINE_S - ($(date +%s) - t_start) )); }
say() { echo "$*" | tee -a "$LOG"; }
step() {  # step NAME LIMIT CMD...
  local name=$1 lim=$2; shift 2
  [ "$lim" -gt "$(left)" ] && lim=$(left)
  if [ "$lim" -lt 10 ]; then say "STEP $name skipped: deadline reached"; return 1; fi
  local t0; t0=$(date +%s)
  timeout -k 5 "$lim" "$@" >>"$LOG" 2>&1
  local rc=$?
  say "STEP $name rc=$rc $(( $(date +%s) - t0 ))s"
  return $rc
}

say "device bench $(date -u +%Y-%m-%dT%H:%M:%SZ): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
say "$(lscpu 2>/dev/null | grep -E '^Model name' | head -1); avx512f: $(grep -c avx512f /proc/cpuinfo) cpus"
PARTS=${PARTS:-"gpu td smallops soak"}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
if python3 -c "import perseus.torch" 2>/dev/null && [ -z "${REINSTALL:-}" ]; then
  say "perseus already installed: $(python3 -c 'import perseus, os; print(os.path.dirname(perseus.__file__))')"
else
  step "install" 200 python3 -m pip install --no-build-isolation --disable-pip-version-check "$ROOT" || exit 1
fi
ls "$ROOT"/.whl/mpi4py-*.whl >/dev/null 2>&1 && ! python3 -c "import mpi4py" 2>/dev/null && \
  step "mpi4py" 60 python3 -m pip install --no-index --disable-pip-version-check "$ROOT"/.whl/mpi4py-*.whl
unset PERSEUS_BUILD_DIR
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if has gpu; then
  step "gpu test_backend_cuda.py" 120 python3 -m pytest -q -p no:cacheprovider --timeout=100 \
    "$ROOT/tests/python/torch_distributed/test_backend_cuda.py"
  step "gpu dist_percall" 60 bash -c "cd /tmp && PYTHONPATH='$ROOT/bench/gpu' python3 '$ROOT/bench/gpu/dist_percall.py' | tee '$OUT/percall_gpu.txt'"
  step "gpu percall_split" 60 bash -c "python3 bench/torch_distributed/percall_split.py --device cuda | tee -a '$OUT/percall_gpu.txt'"
  for round in $(seq 1 "${RESNET_ROUNDS:-2}"); do
    for mode in ddp-nccl ddp-perseus; do
      step "gpu resnet50 $mode round $round" 60 bash -c "cd /tmp && PYTHONPATH='$ROOT/bench/gpu' python3 '$ROOT/bench/gpu/resnet50_synthetic.py' --mode $mode | tee -a '$OUT/resnet50.txt'"
    done
  done
fi
if has ab; then
  for round in $(seq 1 "${AB_ROUNDS:-3}"); do
    for setting in ${AB:-PERSEUS_CALLER_CYCLES=0 PERSEUS_CALLER_CYCLES=1}; do
      say "== ab round $round $setting" && echo "== ab round $round $setting" >>"$OUT/ab.txt"
      step "ab dist_percall $setting" 60 bash -c "cd /tmp && env $setting PYTHONPATH='$ROOT/bench/gpu' python3 '$ROOT/bench/gpu/dist_percall.py' | tee -a '$OUT/ab.txt'"
      step "ab percall_split $setting" 60 bash -c "env $setting python3 bench/torch_distributed/percall_split.py --device cuda | tee -a '$OUT/ab.txt'"
      step "ab allreduce_world1 $setting" 60 bash -c "cd /tmp && env $setting PYTHONPATH='$ROOT/bench/gpu' python3 '$ROOT/bench/gpu/allreduce_world1.py' | tee -a '$OUT/ab.txt'"
    done
  done
fi
if has smallops; then
  reps=${SMALLOPS_REPS:-3}
  step "small ops, 2 and 4 ranks" $(( 70 * reps )) \
    python3 bench/small_ops/run.py --np 2 4 --reps "$reps" --out "$OUT/small_ops.md"
  step "small ops stages, 2 ranks" 120 bash -c "mpirun --bind-to none -np 2 python3 bench/small_ops/stages.py --sizes 4,64,1024 --reps 21 | tee '$OUT/small_ops_stages.txt'"
fi
if has td; then
  td_stamp=$OUT/.td_started
  : >"$td_stamp"
  step "td DDP 2 ranks, FSDP2 2 and 4 ranks" "${TD_LIMIT_S:-$(( $(left) - 100 ))}" \
    python3 bench/torch_distributed/run.py ${TD_ARGS:---rounds 3 --fsdp-ranks 2,4}
  # The report the bench wrote, under whatever name TD_ARGS gave it (run.py --out).
  find bench/results -maxdepth 1 -name 'torch_distributed*' -newer "$td_stamp" \
    -exec cp {} "$OUT/" \;
  rm -f "$td_stamp"
  step "td percall 2 CPU ranks" 90 bash -c "python3 -m perseus.runner -np 2 python3 bench/torch_distributed/percall.py | tee '$OUT/percall.txt'"
fi
if has fsdpprobe; then
  say "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
  step "fsdp per rank, 4 ranks" 400 bash -c "bash bench/probes/fsdp_per_rank.sh 4 | tee '$OUT/fsdp_per_rank.txt'"
fi
if has torchrun; then
  step "torchrun start-up, 30 starts" 150 \
    bash -c "python3 bench/launchers/torchrun_start.py --starts 30 | tee '$OUT/torchrun_start.md'"
fi
if has diag; then
  step "diagnosis cost, ${DIAG_PAIRS:-10} pairs" 240 \
    bash bench/probes/diagnosis_cost.sh "${DIAG_PAIRS:-10}" "$OUT/diagnosis_cost.md"
fi
if has capi; then
  TB=$ROOT/build/device-bench
  gtest=(); [ -d "$ROOT/.devdeps/googletest" ] && gtest=(-DPERSEUS_GTEST_SOURCE_DIR="$ROOT/.devdeps/googletest")
  if step "capi build gpu_capi_phases_bench" 240 bash -c "cmake -S '$ROOT' -B '$TB' -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DPERSEUS_WITH_MPI=OFF ${gtest[*]} >/dev/null && \
      ninja -C '$TB' -j\$(nproc) gpu_capi_phases_bench"; then
    for run in $(seq 1 "${CAPI_RUNS:-3}"); do
      step "capi run $run" 60 bash -c "'$TB/bench/gpu_capi_phases_bench' | tee -a '$OUT/capi_phases.txt'"
    done
  fi
fi
if has profile; then
  # Where the CPU time of the world-size-1 CUDA allreduce goes, sampled (bench/probes/sampler.c:
  # no perf needed): the C API's back-to-back loop (built by part capi), then dist.all_reduce
  # on backend perseus through dist_percall.py (only the samples with a perseus frame).
  TB=$ROOT/build/device-bench
  step "profile sampler build" 30 cc -O2 -shared -fPIC -o /tmp/sampler.so bench/probes/sampler.c -lrt
  if [ -x "$TB/bench/gpu_capi_phases_bench" ]; then
    step "profile capi" 90 env SAMPLER_OUT="$OUT/prof_capi.raw" LD_PRELOAD=/tmp/sampler.so \
      "$TB/bench/gpu_capi_phases_bench" "${PROFILE_CALLS:-100000}"
    # No filter: the loop's frames are inlined into run(), and the loop is nearly all the run.
    step "profile capi report" 60 bash -c "python3 bench/probes/sampler_report.py '$OUT/prof_capi.raw' --top 80 > '$OUT/prof_capi.txt'"
  fi
  # The installed library keeps only its exported symbols: the extension and library of the
  # bench's build tree name every function.
  step "profile build _core" 240 bash -c "cmake -S '$ROOT' -B '$TB' -DPERSEUS_BUILD_PYTHON=ON \
      -DPython_EXECUTABLE=\$(command -v python3) >/dev/null && ninja -C '$TB' -j\$(nproc) _core"
  step "profile dist_percall" 120 bash -c "cd /tmp && SAMPLER_OUT='$OUT/prof_dist.raw' LD_PRELOAD=/tmp/sampler.so PERSEUS_BUILD_DIR='$TB' PYTHONPATH='$ROOT/bench/gpu:$ROOT/python' python3 '$ROOT/bench/gpu/dist_percall.py' --calls 20000"
  step "profile dist_percall report" 60 bash -c "python3 bench/probes/sampler_report.py '$OUT/prof_dist.raw' --only libperseus --top 70 > '$OUT/prof_dist.txt'"
  rm -f "$OUT"/prof_*.raw.*  # addresses of this machine's build: only its reports mean anything
fi
if has soak; then
  # The soak gets what is left, less a minute for its clean end and the report.
  minutes=$(python3 -c "print(max(0.0, ($(left) - 60) / 60.0))")
  say "chaos soak: $minutes minutes"
  step "chaos soak" "$(left)" bash bench/chaos/parallel_soak.sh "$minutes" "${SOAK_SEED:-4811}" 3 5 "$OUT" \
    --gap 0.1 1.0
fi
cp "$LOG" "$OUT/" 2>/dev/null
grep "^STEP" "$LOG"
