#!/bin/bash
# Interleaved before/after: B=/tmp/pb (f713b0f), A=/tmp/pa (HEAD). Idle 2-core machine.
out=/tmp/ba_results.txt; : > $out
for i in $(seq 12); do
  order="pb pa"; [ $((i % 2)) = 0 ] && order="pa pb"
  for t in $order; do
    bin=/tmp/$t/build/bench/engine_latency_bench
    n=$(PERSEUS_POSTED_ALLREDUCE=0 timeout 120 $bin 2 20000 4 2>&1 | grep 'rank 0/')
    echo "$i $t negotiated $n" >> $out
    p=$(timeout 120 $bin 2 20000 4 2>&1 | grep 'rank 0/')
    echo "$i $t posted $p" >> $out
  done
done
for i in $(seq 6); do
  order="pb pa"; [ $((i % 2)) = 0 ] && order="pa pb"
  for t in $order; do
    cd /tmp/$t
    py=$(PERSEUS_BUILD_DIR=/tmp/$t/build PYTHONPATH=/tmp/$t/python timeout 300 python3 -m perseus.runner -np 2 python3 bench/peers/hvd_async_bench.py --library perseus --seconds 1 latency 2>&1 | grep -v '^\[' | tail -2 | tr '\n' ' ')
    echo "$i $t python-async $py" >> $out
    ms=$(PERSEUS_BUILD_DIR=/tmp/$t/build PYTHONPATH=/tmp/$t/python timeout 300 python3 -m perseus.runner -np 2 /tmp/$t/build/bench/perseus_collectives_bench model-step 2>&1 | tail -3 | tr '\n' ' ')
    echo "$i $t model-step $ms" >> $out
  done
done
echo DONE >> $out
