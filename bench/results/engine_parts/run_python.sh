#!/bin/bash
out=/tmp/ba_py.txt; : > $out
for i in $(seq 8); do
  order="pb pa"; [ $((i % 2)) = 0 ] && order="pa pb"
  for t in $order; do
    cd /tmp/$t
    py=$(PERSEUS_BUILD_DIR=/tmp/$t/build PYTHONPATH=/tmp/$t/python timeout 300 python3 -m perseus.runner -np 2 python3 bench/peers/hvd_async_bench.py --library perseus --seconds 1 latency 2>&1 | grep async-latency | tail -1)
    echo "$i $t python-async $py" >> $out
    bl=$(PERSEUS_BUILD_DIR=/tmp/$t/build PYTHONPATH=/tmp/$t/python SAMPLES=5 MIN_SAMPLE_S=0.05 timeout 300 python3 -m perseus.runner -np 2 python3 bench/peers/hvd_collectives_bench.py --library perseus --collective allreduce --max-mib 0.000004 2>&1 | grep '"bytes": 4,' | tail -1)
    echo "$i $t python-blocking $bl" >> $out
  done
done
echo DONE >> $out
