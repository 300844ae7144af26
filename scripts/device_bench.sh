#!/usr/bin/env bash
# The CPU benchmarks that need a quiet many-core host, run on the device machine (16 cores)
# through the user's install: torchrun's start-up spread (issue: torchrun start-up), small
# collectives from Python against mpi4py and Gloo, and the elastic chaos soak for the time left.
# GPU figures come from scripts/device_check.sh, not from here.
#
# THE CALL:
#   here, once: put an mpi4py wheel for the device's Python into .whl/ (pip download mpi4py
#   --only-binary :all: --python-version 3.12 -d .whl); then
#   run(command="bash scripts/device_bench.sh", carry=[".whl"], timeout_s=600)
# What comes back under $OUT: device_bench.log, torchrun_start.md, small_ops.md/.jsonl,
# chaos_soak.md, soak_raw.tgz and soak<i>.log.
# Environment: DEADLINE_S (default 560) bounds the whole call; SOAK_SEED (default 4811).
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
step "install" 200 python3 -m pip install --no-build-isolation --disable-pip-version-check "$ROOT" || exit 1
ls "$ROOT"/.whl/mpi4py-*.whl >/dev/null 2>&1 && \
  step "mpi4py" 60 python3 -m pip install --no-index --disable-pip-version-check "$ROOT"/.whl/mpi4py-*.whl
unset PERSEUS_BUILD_DIR
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step "torchrun start-up, 30 starts" 150 \
  bash -c "python3 bench/launchers/torchrun_start.py --starts 30 | tee '$OUT/torchrun_start.md'"
step "small ops, 2 and 4 ranks" 170 \
  python3 bench/small_ops/run.py --np 2 4 --reps 3 --out "$OUT/small_ops.md"
# The soak gets what is left, less a minute for its clean end and the report.
minutes=$(python3 -c "print(max(0.0, ($(left) - 60) / 60.0))")
say "chaos soak: $minutes minutes"
step "chaos soak" "$(left)" bash bench/chaos/parallel_soak.sh "$minutes" "${SOAK_SEED:-4811}" 3 5 "$OUT" \
  --gap 0.1 1.0
cp "$LOG" "$OUT/" 2>/dev/null
grep "^STEP" "$LOG"
