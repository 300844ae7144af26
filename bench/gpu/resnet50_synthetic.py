"""Horovod's synthetic benchmark pattern: ResNet-50, batch 64, synthetic ImageNet-sized data,
SGD, images per second.

    python resnet50_synthetic.py --mode plain      # torch alone: perseus is never imported
    python resnet50_synthetic.py --mode perseus    # hvd.DistributedOptimizer at world size 1
    python resnet50_synthetic.py --mode fp16       # ... with compression=hvd.Compression.fp16
    python resnet50_synthetic.py --mode ddp-nccl   # torch DDP on torch's own NCCL backend
    python resnet50_synthetic.py --mode ddp-perseus  # the same DDP on backend "perseus"

Each mode runs in its own process (scripts/device_check.sh alternates them), so the plain run
carries no trace of Perseus. Prints `RESULT resnet50 mode=... img_s=...`: the median over
--batches timed batches of --iters iterations each, after --warmup iterations."""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=["plain", "perseus", "fp16", "ddp-nccl", "ddp-perseus"],
                   required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--cpu", action="store_true", help="rehearsal: resnet18, 32x32, 2 images")
    args = p.parse_args()

    hvd = None
    if args.mode.startswith("ddp-"):
        return run_ddp(args)
    if args.mode != "plain":
        import perseus.torch as hvd
        hvd.init()
    dev = torch.device("cpu" if args.cpu else "cuda", hvd.local_rank() if hvd and not args.cpu else 0)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    model, size, batch = model_and_size(args, dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if hvd is not None:
        compression = hvd.Compression.fp16 if args.mode == "fp16" else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    time_steps(args, model, optimizer, dev, size, batch)
    if hvd is not None:
        hvd.shutdown()


def model_and_size(args, dev):
    import torchvision
    if args.cpu:
        args.warmup, args.iters, args.batches = 1, 1, 2
        return torchvision.models.resnet18().to(dev), 32, 2
    return torchvision.models.resnet50().to(dev), 224, args.batch_size


def run_ddp(args):
    """torch DDP at world size 1 over a TCP store, on the backend the mode names (gloo stands
    for NCCL in the --cpu rehearsal). DDP allreduces its gradient buckets at any size."""
    import socket
    import torch.distributed as dist
    backend = args.mode[len("ddp-"):]
    if backend == "perseus":
        import perseus.torch.distributed  # noqa: F401  (registers the backend)
    elif args.cpu:
        backend = "gloo"
    dev = torch.device("cpu" if args.cpu else "cuda", 0)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1)
    model, size, batch = model_and_size(args, dev)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if args.cpu else [dev.index])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    time_steps(args, ddp, optimizer, dev, size, batch)
    dist.destroy_process_group()


def time_steps(args, model, optimizer, dev, size, batch):
    data = torch.randn(batch, 3, size, size, device=dev)
    target = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(args.warmup):
        step()
    sync()
    rates = []
    for _ in range(args.batches):
        t0 = time.perf_counter()
        for _ in range(args.iters):
            step()
        sync()
        rates.append(batch * args.iters / (time.perf_counter() - t0))
    print("RESULT resnet50 mode=%s batch=%d img_s=%.1f spread=%.1f-%.1f" % (
        args.mode, batch, statistics.median(rates), min(rates), max(rates)), flush=True)


if __name__ == "__main__":
    main()
