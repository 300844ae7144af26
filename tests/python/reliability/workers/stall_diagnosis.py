"""The cases of the early stall diagnosis and the straggler flag, at 3 ranks (see
test_stall_diagnosis.py): rank 1 sleeps in Python, rank 1 skips one collective, rank 2 is
slowed by a busy loop, and under torch.distributed (the "perseus" backend) rank 1 of a DDP job
sleeps before its backward, so the others wait in DDP's gradient all_reduce, then before a
direct dist.all_reduce."""

import time

import torch

import perseus.torch as hvd
from relcommon import RANK, parse, Results

SLEEP_S = 4.5
STEPS = 100


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def sleeper(res):
    small = torch.ones(4)
    for _ in range(3):
        hvd.allreduce(small, name="diag.metric")
    if RANK == 1:
        time.sleep(SLEEP_S)
    hvd.allreduce(small, name="diag.metric")  # the others wait here for rank 1
    for _ in range(3):
        hvd.allreduce_(small, name="diag.inplace")
    if RANK == 1:
        time.sleep(SLEEP_S)
    hvd.allreduce_(small, name="diag.inplace")  # a C function: no perseus frame, no handle
    res.report(outcome="ok")


def skipper(res):
    big = torch.ones(16384)
    for _ in range(3):
        hvd.allreduce(big, name="diag.grad")
    try:
        if RANK != 1:
            hvd.allreduce(big, name="diag.skipped")  # rank 1 never submits it
        hvd.allreduce(big, name="diag.next")
        res.report(outcome="ok")
    except Exception as exc:  # PERSEUS_STALL_SHUTDOWN ends the deadlock
        res.raised(exc)


def straggler(res):
    grad = torch.ones(16384)  # above the posted lane's 4 KiB: negotiated every step
    step_s = 0.05
    for _ in range(STEPS):
        busy(step_s * 1.3 if RANK == 2 else step_s)
        hvd.allreduce(grad, name="diag.step")
    res.report(outcome="ok")


def ddp_sleeper(res):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("perseus")  # perseusrun's store: no MASTER_ADDR needed
    model = DistributedDataParallel(torch.nn.Linear(16, 4))
    for step in range(3):
        loss = model(torch.ones(2, 16)).sum()
        if step == 2 and RANK == 1:
            time.sleep(SLEEP_S)
        loss.backward()  # the others wait in DDP's all_reduce of the gradient bucket
    metric = torch.ones(4)
    dist.all_reduce(metric)
    if RANK == 1:
        time.sleep(SLEEP_S)
    dist.all_reduce(metric)  # the others wait here, in the backend's blocking call
    dist.destroy_process_group()
    res.report(outcome="ok")


def main():
    modes = {"sleep": sleeper, "skip": skipper, "straggler": straggler}
    args = parse(lambda p: p.add_argument("mode", choices=list(modes) + ["ddp"]))
    res = Results(args.results)
    torch.set_num_threads(1)
    if args.mode == "ddp":  # torch.distributed starts the engine itself
        ddp_sleeper(res)
        return
    hvd.init()
    modes[args.mode](res)
    hvd.shutdown()


if __name__ == "__main__":
    main()
