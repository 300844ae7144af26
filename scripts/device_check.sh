#!/usr/bin/env bash
# One-call GPU verification for the device machine (see docs/perf/gpu.md):
#   1. records the device, driver, toolkit and NCCL;
#   2. runs every GPU test binary (tests/cpp/gpu_*_test), plus compute-sanitizer memcheck on
#      the kernel tests;
#   3. times (a) the fusion copy/cast kernels against cudaMemcpy D2D of the same bytes (in
#      gpu_fusion_bandwidth_test), (b) the NCCL backend at world size 1 next to
#      torch.distributed NCCL world size 1 at 4 B / 1 MiB / 256 MiB, (c) 2 ranks on one GPU
#      through the host-staged path (gpu_host_staged_test);
#   4. prints a summary table last; full logs go to $OUT.
#
# Usage: scripts/device_check.sh [BIN_DIR]
#   BIN_DIR holds test binaries built elsewhere (carried; default .devbin). When it has none,
#   the script builds here into build-device (needs GTest on the machine).
# Prepare a carried build on a machine without a GPU:
#   cmake -S . -B build-gpu -G Ninja -DPERSEUS_WITH_CUDA=ON -DPERSEUS_WITH_MPI=OFF
#   ninja -C build-gpu && mkdir -p .devbin && cp build-gpu/tests/cpp/gpu_*_test .devbin/
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off in everything started from here (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perseus-device-check}
mkdir -p "$OUT"
BIN=${1:-.devbin}
LOG=$OUT/device_check.log
SUMMARY=$OUT/summary.txt
: >"$LOG"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$LOG"; }
t_start=$(date +%s)

say "==== device ($(date -u +%Y-%m-%dT%H:%MZ))"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
(nvcc --version 2>&1 | tail -2; uname -r; nproc) | tee -a "$LOG"

# libnccl.so.2: the system's, else the one PyTorch's wheels carry.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
  nccl_dir=$(python3 - <<'EOF' 2>/dev/null
import glob, site
for d in site.getsitepackages():
    for f in glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2"):
        print(f.rsplit("/", 1)[0]); raise SystemExit
EOF
)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$nccl_dir:${LD_LIBRARY_PATH:-}"
fi
say "libnccl: ${nccl_dir:-system} $(python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' 2>&1 | tail -1)"

if ! ls "$BIN"/gpu_*_test >/dev/null 2>&1; then
  say "==== no carried binaries in $BIN: building here"
  cmake -S . -B build-device -G Ninja -DPERSEUS_WITH_CUDA=ON -DPERSEUS_WITH_MPI=OFF \
    -DPERSEUS_BUILD_BENCH=OFF >>"$LOG" 2>&1 && ninja -C build-device -j "$(nproc)" >>"$LOG" 2>&1 \
    || { say "BUILD FAILED (see log)"; tail -30 "$LOG"; exit 1; }
  BIN=build-device/tests/cpp
fi
say "==== sm_90 code in the kernels"
(cuobjdump --list-elf "$BIN/gpu_kernels_test" 2>&1 | head -5) | tee -a "$LOG"

failed=0
for t in "$BIN"/gpu_*_test; do
  name=$(basename "$t")
  say "==== $name"
  timeout 240 "$t" --gtest_color=no >"$OUT/one.log" 2>&1
  rc=$?
  cat "$OUT/one.log" >>"$LOG"
  status=$([ $rc = 0 ] && echo PASS || echo "FAIL(rc=$rc)")
  echo "TEST $name $status" | tee -a "$LOG" >>"$SUMMARY"
  if [ $rc != 0 ]; then
    failed=1
    grep -E "Failure|FAILED|what\(\)|error|Expected|Which is|rror:" "$OUT/one.log" | head -40 >>"$SUMMARY"
  fi
done

say "==== compute-sanitizer memcheck on gpu_kernels_test"
if command -v compute-sanitizer >/dev/null; then
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/gpu_kernels_test" \
    --gtest_color=no >>"$LOG" 2>&1
  echo "MEMCHECK gpu_kernels_test rc=$?" | tee -a "$LOG" >>"$SUMMARY"
fi

say "==== torch.distributed NCCL world size 1 (baseline for (b))"
timeout 180 python3 - >>"$LOG" 2>&1 <<'EOF'
import os, time, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
for nbytes in (4, 1 << 20, 256 << 20):
    x = torch.zeros(nbytes // 4, device="cuda")
    reps = 20 if nbytes > (1 << 20) else 200
    ts = []
    for i in range(reps + 5):
        t0 = time.perf_counter(); dist.all_reduce(x); torch.cuda.synchronize(); t1 = time.perf_counter()
        if i >= 5: ts.append((t1 - t0) * 1e6)
    ts.sort()
    print(f"TORCHNCCL allreduce world1 bytes={nbytes} median_us={ts[len(ts)//2]:.1f}")
dist.destroy_process_group()
EOF
echo "torch baseline rc=$?" >>"$LOG"

grep -h "^GPUBW\|^GPUSTAGED\|^GPUNCCL\|^TORCHNCCL" "$LOG" >>"$SUMMARY"
echo "elapsed_s=$(( $(date +%s) - t_start ))" >>"$SUMMARY"
rm -f "$OUT/one.log"
say "==== summary"
cat "$SUMMARY"
exit $failed
