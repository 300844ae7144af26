#!/usr/bin/env bash
# The per-call cost of a 4-byte CUDA dist.all_reduce at world size 1, the installed package
# (new) against another tree (old: a `git archive` tarball, built into a side directory by the
# same pip), alternated ROUNDS times in one call so that both read against the same host: the
# device's hosts differ by up to 2x between calls. Each round runs bench/gpu/dist_percall.py
# (perseus against the no-op floor and nccl) and percall_split.py's whole/floor rows.
#     bash bench/probes/percall_ab.sh OLD.tar [ROUNDS]     # after pip install . of the new tree
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
old_tar=$1
rounds=${2:-3}
side=/tmp/perseus-ab-old
rm -rf "$side" && mkdir -p "$side/src"
tar -xf "$old_tar" -C "$side/src" || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check --target "$side/site" \
  "$side/src" >"$side/install.log" 2>&1 || { tail -20 "$side/install.log"; exit 1; }
for round in $(seq 1 "$rounds"); do
  for tree in old new; do
    path=""
    [ "$tree" = old ] && path="$side/site"
    echo "== $tree round $round"
    (cd /tmp && PYTHONPATH="$path:$ROOT/bench/gpu" timeout 60 python3 "$ROOT/bench/gpu/dist_percall.py")
    PYTHONPATH="$path" timeout 60 python3 bench/torch_distributed/percall_split.py --device cuda |
      grep -E "^  (floor|whole|s:entry)"
  done
done
