#!/usr/bin/env bash
# Acceptance check, outside CI: an unchanged `horovodrun -np 2 python train.py` (Horovod 0.28.1,
# Gloo mode) runs as one Perseus job of 2 ranks, which meet through horovodrun's own rendezvous
# server (docs/horovod-compatibility.md, "Launching with horovodrun").
# Outside CI because horovodrun's Gloo mode starts only where Horovod compiled a framework
# extension (about 30 minutes on 2 cores: bench/peers/build_horovod.sh).
# Usage: tests/acceptance/horovodrun_job.sh   (prints PASS or fails naming what it saw)
set -euo pipefail
source "$(dirname "$0")/common.sh"
require_horovodrun
cd /tmp
out=$(horovodrun -np 2 -H localhost:2 --gloo \
  $PYTHON "$ROOT/tests/python/launchers/topology_worker.py" 2>&1) || {
  echo "$out"; echo "FAIL: horovodrun exited with an error" >&2; exit 1; }
echo "$out"
$PYTHON - "$out" <<'PY'
import json, sys
rows = [json.loads(l.split("PERSEUS_RESULT ", 1)[1]) for l in sys.argv[1].splitlines()
        if "PERSEUS_RESULT " in l]
ranks = sorted(r["rank"] for r in rows)
assert ranks == [0, 1], "expected ranks 0 and 1 of one job, got %s" % rows
assert all(r["size"] == 2 and r["value"] == [1.5] * 4 for r in rows), rows
print("PASS: horovodrun -np 2 formed one Perseus job of 2 ranks; allreduce gave %s"
      % rows[0]["value"])
PY
