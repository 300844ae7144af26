#!/usr/bin/env bash
# Acceptance check, outside CI: the migrating user's path (docs/migrating-from-horovod.md).
# Horovod's examples/pytorch/pytorch_synthetic_benchmark.py with only its import changed
# (python/perseus/examples/horovod_pytorch_synthetic_benchmark.py) runs at 2 ranks on the CPU
# under the launcher named, with the same flags as its horovodrun line; a small model and few
# batches keep it near a minute.
# Usage: tests/acceptance/horovod_example.sh [perseusrun|horovodrun]   (default perseusrun)
set -euo pipefail
source "$(dirname "$0")/common.sh"
launcher=${1:-perseusrun}
# Horovod's example builds its model with torchvision, which Perseus itself does not need.
$PYTHON -c "import torchvision" 2>/dev/null || {
  echo "acceptance: Horovod's example needs torchvision: pip install torchvision" >&2
  exit 2
}
args=(-np 2 -H localhost:2 $PYTHON "$EXAMPLES/horovod_pytorch_synthetic_benchmark.py" --no-cuda
      --model resnet18 --batch-size 4 --num-warmup-batches 1 --num-batches-per-iter 2
      --num-iters 3)
cd /tmp
case $launcher in
  perseusrun) out=$($PYTHON -m perseus.runner "${args[@]}" 2>&1) || { echo "$out"; exit 1; } ;;
  horovodrun) require_horovodrun; out=$(horovodrun "${args[@]}" 2>&1) || { echo "$out"; exit 1; } ;;
  *) echo "usage: $0 [perseusrun|horovodrun]" >&2; exit 2 ;;
esac
echo "$out"
grep -q "Number of CPUs: 2" <<<"$out" || { echo "FAIL: not one job of 2 ranks" >&2; exit 1; }
grep -q "Total img/sec on 2 CPU(s)" <<<"$out" || { echo "FAIL: no result line" >&2; exit 1; }
echo "PASS: Horovod's synthetic benchmark ran under $launcher as one job of 2 ranks"
