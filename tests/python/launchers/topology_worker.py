"""Started by each launcher under test: joins the job, runs one allreduce, and prints one
line 'PERSEUS_RESULT {json}' with the six topology values, the result and timings.
--api torch goes through perseus.torch (a user's script with only the import changed);
the default, perseus._core, keeps start-up cheap on a 2-core machine."""
import json
import os
import socket
import sys
import time

start = time.time()
api = sys.argv[sys.argv.index("--api") + 1] if "--api" in sys.argv else "core"
if api == "torch":
    import torch
    import perseus.torch as hvd
    hvd.init()
    topo = {k: getattr(hvd, k)() for k in
            ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")}
    init_done = time.time()
    value = hvd.allreduce(torch.full((4,), float(topo["rank"] + 1)), name="x").tolist()
else:
    import numpy as np
    from perseus import _core
    _core.init()
    topo = {k: v for k, v in _core.topology().items()
            if k in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")}
    init_done = time.time()
    a = np.full(4, topo["rank"] + 1.0, dtype=np.float32)
    _core.allreduce("x", a).wait()
    value = a.tolist()
done = time.time()
print("PERSEUS_RESULT " + json.dumps(dict(
    topo, value=value, host=socket.gethostname(), start=start, init_done=init_done,
    first_allreduce=done)), flush=True)
