#!/usr/bin/env bash
# What the stall diagnosis and the straggler accounting (PERSEUS_STALL_DIAGNOSIS,
# PERSEUS_STRAGGLER_THRESHOLD) cost on bench/training's model at 2 ranks. Runs alternate,
# accounting on (the defaults) then off, so that a noisy host shifts both alike; each pair's
# ratio (on / off samples per second) is printed, then their median.
# Usage: bench/probes/diagnosis_cost.sh [pairs]    (PERSEUS_BUILD_DIR=<build> for a build tree)
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-5}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
run() {
  env "$@" $PY -m perseus.runner -np 2 $PY bench/training/torch_train_bench.py --library perseus \
    --steps 10 --iters 5 | $PY -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["samples_per_s"])'
}
ratios=()
for i in $(seq "$PAIRS"); do
  on=$(run PERSEUS_STALL_DIAGNOSIS=2 PERSEUS_STRAGGLER_THRESHOLD=0.05)
  off=$(run PERSEUS_STALL_DIAGNOSIS=0 PERSEUS_STRAGGLER_THRESHOLD=0)
  r=$($PY -c "print(f'{$on / $off:.4f}')")
  echo "pair $i: on $on samples/s, off $off samples/s, on/off $r"
  ratios+=("$r")
done
$PY -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'median on/off: {statistics.median(v):.4f} over {len(v)} pairs (min {min(v):.4f}, max {max(v):.4f})')" "${ratios[@]}"
