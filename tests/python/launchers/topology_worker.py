"""Started by each launcher under test: joins the job, runs one allreduce, and prints one
line 'PERSEUS_RESULT {json}' with the six topology values, the result and timings.
--api torch goes through perseus.torch (a user's script with only the import changed);
the default, perseus._core, keeps start-up cheap on a 2-core machine. --ports adds this
process's TCP sockets."""
import json
import os
import socket
import sys
import time

start = time.time()
api = sys.argv[sys.argv.index("--api") + 1] if "--api" in sys.argv else "core"
SIX = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")
if api == "torch":
    import torch
    import perseus.torch as hvd
    imported = time.time()
    hvd.init()
    topo = {k: getattr(hvd, k)() for k in SIX}
    init_done = time.time()
    value = hvd.allreduce(torch.full((4,), float(topo["rank"] + 1)), name="x").tolist()
else:
    import numpy as np
    from perseus import _core
    imported = time.time()
    _core.init()
    topo = {k: v for k, v in _core.topology().items() if k in SIX}
    init_done = time.time()
    a = np.full(4, topo["rank"] + 1.0, dtype=np.float32)
    _core.allreduce("x", a).wait()
    value = a.tolist()
first_allreduce = time.time()


def tcp_sockets():
    """This process's TCP sockets as [state, local port, remote port] (state 10: listening,
    1: connected): its socket inodes matched in /proc/net/tcp*."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    sockets = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    sockets.append([int(fields[3], 16)] + [int(fields[i].rsplit(":", 1)[1], 16)
                                                          for i in (1, 2)])
    return sockets


extra = {"tcp": tcp_sockets()} if "--ports" in sys.argv else {}
(hvd if api == "torch" else _core).shutdown()
print("PERSEUS_RESULT " + json.dumps(dict(
    topo, value=value, host=socket.gethostname(), start=start, imported=imported,
    init_done=init_done, first_allreduce=first_allreduce, **extra)), flush=True)
