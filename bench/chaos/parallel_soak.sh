#!/usr/bin/env bash
# Several chaos soaks at once on one host, each pinned to its own CPUs (taskset), so that a
# bounded wall time yields more faults without the jobs competing for cores; then one report
# over all of them and a tarball of their raw records.
# Usage: bench/chaos/parallel_soak.sh MINUTES FIRST_SEED SOAKS CPUS_EACH OUT_DIR [soak.py args]
#   e.g. bench/chaos/parallel_soak.sh 7.5 3811 3 5 "$OUT"    (16 cores: CPUs 0-4, 5-9, 10-14)
# Writes OUT_DIR/chaos_soak.md (report.py over the runs) and OUT_DIR/soak_raw.tgz (each run's
# folder, which report.py reads again after extraction, and its log soak<i>.log): two files, so
# that a device call, which brings back at most 8, brings back both.
# Runs the perseus that python3 finds (the installed package), or PERSEUS_BUILD_DIR's.
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES=$1 SEED=$2 SOAKS=$3 EACH=$4 OUT=$5
shift 5
RUNS=$(mktemp -d /tmp/chaos_runs.XXXXXX)
mkdir -p "$OUT"
dirs=()
pin=(taskset -c)
command -v taskset > /dev/null || { echo "no taskset: the soaks share every CPU" >&2; pin=(); }
for i in $(seq 0 $((SOAKS - 1))); do
  cpus=$((i * EACH))-$((i * EACH + EACH - 1))
  ${pin[@]+"${pin[@]}"} ${pin[@]+"$cpus"} python3 bench/chaos/soak.py --minutes "$MINUTES" --seed $((SEED + i)) \
    --out "$RUNS/soak$i" "$@" > "$RUNS/soak$i.log" 2>&1 &
  dirs+=("$RUNS/soak$i")
done
status=0
wait || status=$?
python3 bench/chaos/report.py "${dirs[@]}" > "$OUT/chaos_soak.md"
tar czf "$OUT/soak_raw.tgz" -C "$RUNS" .
exit $status
