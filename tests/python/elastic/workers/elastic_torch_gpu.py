"""elastic_loop.py's loop on CUDA tensors through perseus.torch: every worker shares GPU 0 (the
host-staged path when several ranks hold one GPU), so a reset must rebuild the GPU backend's
state for the new membership."""

import time

import torch

import perseus.torch as hvd
from perseus.common.elastic import worker as elastic_worker
from perseus.common.exceptions import PerseusInternalError

import elastic_common


def main():
    args = elastic_common.parse()
    record = elastic_common.recorder(args.results)

    torch.cuda.set_device(0)
    hvd.init()
    step, synced = 0, False
    while True:
        try:
            if not synced:
                s = hvd.allreduce(torch.tensor([step], device="cuda"), op=hvd.Max, name="step")
                step, synced = int(s.item()), True
                record(event="joined", rank=hvd.rank(), size=hvd.size(), step=step)
            if step >= args.steps:
                break
            if elastic_worker.host_updates_pending():
                elastic_worker.reset()
                synced = False
                continue
            x = hvd.allreduce(torch.ones(1 << 16, device="cuda"), op=hvd.Sum, name="grad")
            assert float(x[0]) == hvd.size() and float(x[-1]) == hvd.size(), float(x[0])
            step += 1
            record(event="step", rank=hvd.rank(), size=hvd.size(), step=step)
            time.sleep(args.step_sleep)
        except PerseusInternalError as e:
            record(event="failed", step=step, error=str(e)[:300])
            elastic_worker.reset()
            synced = False
    record(event="done", rank=hvd.rank(), size=hvd.size(), step=step)
    hvd.shutdown()


if __name__ == "__main__":
    main()
