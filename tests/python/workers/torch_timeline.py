"""start_timeline()/stop_timeline() at run time on every rank; the files are merged by the test."""
import sys

import torch

import perseus.torch as hvd

hvd.init()
path = sys.argv[1]
t = torch.ones(4096)  # above the posted lane (4 KiB), which has no spans
hvd.allreduce(t, name="tl.before")
hvd.start_timeline(path)
for _ in range(3):
    hvd.allreduce(t, name="tl.during")
hvd.stop_timeline()
hvd.allreduce(t, name="tl.after")
hvd.shutdown()
