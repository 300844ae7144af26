#!/usr/bin/env bash
# What the stall diagnosis and the straggler accounting (PERSEUS_STALL_DIAGNOSIS,
# PERSEUS_STRAGGLER_THRESHOLD) cost on bench/training's model at 2 ranks. Runs alternate,
# accounting on (the defaults) then off, so that a noisy host shifts both alike; each pair's
# ratio (on / off samples per second) is printed, then their median; then the same for
# negotiated small allreduces per second (probes/negotiated_op_rate.py), the small-op path that
# goes through negotiation.
# Usage: bench/probes/diagnosis_cost.sh [pairs]    (PERSEUS_BUILD_DIR=<build> for a build tree)
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-5}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
last_value() {  # the field $1 of the last JSON line on stdin
  $PY -c 'import json,sys; print([json.loads(l[l.index("{"):]) for l in sys.stdin if "{" in l][-1][sys.argv[1]])' "$1"
}
training() {
  env "$@" $PY -m perseus.runner -np 2 $PY bench/training/torch_train_bench.py --library perseus \
    --steps 10 --iters 5 | last_value samples_per_s
}
small_ops() {
  env "$@" $PY -m perseus.runner -np 2 $PY bench/probes/negotiated_op_rate.py | last_value ops_per_s
}
compare() {  # $1: the measuring function; prints each pair and the median ratio
  local ratios=() on off r
  for i in $(seq "$PAIRS"); do
    on=$($1 PERSEUS_STALL_DIAGNOSIS=2 PERSEUS_STRAGGLER_THRESHOLD=0.05)
    off=$($1 PERSEUS_STALL_DIAGNOSIS=0 PERSEUS_STRAGGLER_THRESHOLD=0)
    r=$($PY -c "print(f'{$on / $off:.4f}')")
    echo "$1 pair $i: on $on, off $off, on/off $r"
    ratios+=("$r")
  done
  $PY -c "import statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(f'{sys.argv[1]}: median on/off {statistics.median(v):.4f} over {len(v)} pairs (min {min(v):.4f}, max {max(v):.4f})')" "$1" "${ratios[@]}"
}
compare training
compare small_ops
