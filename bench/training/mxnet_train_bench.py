"""End-to-end training throughput with MXNet Gluon: the same model (model_spec.py), synthetic
data and step count through

  perseus-trainer  perseus.mxnet.DistributedTrainer (Horovod API)
  perseus-kvstore  gluon.Trainer(kvstore=perseus.mxnet.create('dist_sync_perseus'))
  horovod          horovod.mxnet.DistributedTrainer
  mxnet-ps         gluon.Trainer(kvstore='dist_sync'): MXNet's parameter servers (a scheduler,
                   --servers server processes and the workers, all on localhost)
  none             gluon.Trainer(kvstore=None), one process: the compute-only step, the
                   reference the others' per-step overhead is measured from

    perseusrun -np 2 python bench/training/mxnet_train_bench.py --library perseus-trainer
    horovodrun --gloo -np 2 -H localhost:2 python bench/training/mxnet_train_bench.py --library horovod
    python bench/training/mxnet_train_bench.py --library mxnet-ps --ranks 2   # starts its processes

Each worker computes with one thread (OMP_NUM_THREADS=1, MXNET_CPU_WORKER_NTHREADS=1), as in
torch_train_bench.py. Rank 0 prints one JSON line: samples/s over all ranks from the median of
--iters windows of --steps steps (the window ends with mx.nd.waitall()). Training is
synchronous, so rank 0's pace is every rank's.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

for _var in ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_spec import ModelSpec  # noqa: E402

LIBRARIES = ("perseus-trainer", "perseus-kvstore", "horovod", "mxnet-ps", "none")


def build_net(spec, mx, gluon):
    net = gluon.nn.HybridSequential()
    flat = spec.conv * (spec.image // 2) ** 2
    net.add(gluon.nn.Conv2D(spec.conv, 3, padding=1, in_channels=spec.channels,
                            activation="relu"),
            gluon.nn.Conv2D(spec.conv, 3, padding=1, in_channels=spec.conv, activation="relu"),
            gluon.nn.MaxPool2D(2), gluon.nn.Flatten())
    dims = [flat] + [spec.width] * spec.depth
    for a, b in zip(dims, dims[1:]):
        net.add(gluon.nn.Dense(b, in_units=a, activation="relu"))
    net.add(gluon.nn.Dense(spec.classes, in_units=spec.width))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize()
    return net


def make_trainer(library, net, gluon):
    """Returns (trainer, rank, size)."""
    opts = {"learning_rate": 0.01, "momentum": 0.9}
    params = net.collect_params()
    if library in ("perseus-trainer", "horovod"):
        if library == "horovod":
            import horovod.mxnet as hvd
        else:
            import perseus.mxnet as hvd
        hvd.init()
        hvd.broadcast_parameters(params, root_rank=0)
        return hvd.DistributedTrainer(params, "sgd", opts), hvd.rank(), hvd.size()
    if library == "none":
        return gluon.Trainer(params, "sgd", opts, kvstore=None), 0, 1
    if library == "perseus-kvstore":
        import perseus.mxnet
        kv = perseus.mxnet.create("dist_sync_perseus")
    else:
        import mxnet as mx
        kv = mx.kv.create("dist_sync")
    return gluon.Trainer(params, "sgd", opts, kvstore=kv), kv.rank, kv.num_workers


def worker(args):
    import mxnet as mx
    from mxnet import autograd, gluon
    spec = args.spec
    net = build_net(spec, mx, gluon)
    trainer, rank, size = make_trainer(args.library, net, gluon)
    mx.random.seed(1234 + rank)
    data = mx.nd.random.normal(shape=(args.batch_size, spec.channels, spec.image, spec.image))
    label = mx.nd.random.randint(0, spec.classes, shape=(args.batch_size,)).astype("float32")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(args.batch_size)

    for _ in range(args.warmup):
        step()
    mx.nd.waitall()
    windows = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        mx.nd.waitall()
        windows.append(time.perf_counter() - t0)
    step_s = statistics.median(windows) / args.steps
    if rank == 0:
        params = list(net.collect_params().values())
        print(json.dumps({
            "library": args.label or args.library, "framework": "mxnet", "collective": "train",
            "ranks": size, "batch_per_rank": args.batch_size, "step_ms": step_s * 1e3,
            "samples_per_s": size * args.batch_size / step_s, "tensors": len(params),
            "params": sum(int(p.data().size) for p in params), "model": spec.describe()}),
            flush=True)
    if args.library in ("perseus-trainer", "horovod"):
        import importlib
        importlib.import_module("horovod.mxnet" if args.library == "horovod"
                                else "perseus.mxnet").shutdown()


def launch_ps(args):
    """Starts MXNet's scheduler, servers and workers on localhost; returns the workers' exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                DMLC_NUM_SERVER=str(args.servers), DMLC_NUM_WORKER=str(args.ranks),
                DMLC_INTERFACE="lo", PS_VERBOSE="0")
    # Importing mxnet with DMLC_ROLE=scheduler/server runs that role's loop, then exits.
    infra = [subprocess.Popen([sys.executable, "-c", "import mxnet"],
                              env=dict(base, DMLC_ROLE=role))
             for role in ["scheduler"] + ["server"] * args.servers]
    argv = [a for a in sys.argv[1:]]
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ps-worker"] + argv,
                                env=dict(base, DMLC_ROLE="worker"))
               for _ in range(args.ranks)]
    rc = 0
    try:
        for w in workers:
            rc = rc or w.wait(timeout=args.timeout)
        for p in infra:
            p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        print("mxnet-ps: timed out after %d s" % args.timeout, file=sys.stderr)
        rc = 124
    finally:
        for p in workers + infra:
            if p.poll() is None:
                p.kill()
                p.wait()
    return rc


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, choices=LIBRARIES)
    p.add_argument("--label", default=None)
    p.add_argument("--ranks", type=int, default=1, help="mxnet-ps only: workers to start")
    p.add_argument("--servers", type=int, default=1, help="mxnet-ps only: server processes")
    p.add_argument("--timeout", type=int, default=600, help="mxnet-ps only: seconds")
    p.add_argument("--ps-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--steps", type=int, default=10, help="steps per timed window")
    p.add_argument("--iters", type=int, default=5, help="timed windows")
    p.add_argument("--warmup", type=int, default=5)
    ModelSpec.add_arguments(p)
    args = p.parse_args()
    args.spec = ModelSpec.from_args(args)
    if args.library == "mxnet-ps" and not args.ps_worker:
        return launch_ps(args)
    worker(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
