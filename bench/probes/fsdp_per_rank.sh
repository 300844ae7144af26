#!/usr/bin/env bash
# FSDP2 at 4 ranks, each rank's own step, page faults and waiting (fsdp.py's per_rank and
# last_arrivals), for perseus with and without glibc's heap thresholds fixed and with the
# engine's spin off, beside Gloo and the no-communication floor: whether the time a rank waits
# for the others follows what its backend sends or its allocator's page faults.
#     bash bench/probes/fsdp_per_rank.sh [ranks]     # one JSON line per run, after "== cmd"
set -uo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-4}
run() { echo "== $*"; timeout 120 env "$@" 2>&1 | grep '^{'; }
F="python3 bench/torch_distributed/fsdp.py --ranks $ranks --bind-to core --iters 4"
run $F --backend perseus
run PERSEUS_SPIN_US=0 $F --backend perseus
run MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456 $F --backend perseus
run $F --backend gloo
run $F --backend local
run $F --backend perseus
