"""Step (d), and the 2-GPU SyncBatchNorm figure of step (e): perseus.torch SyncBatchNorm
forward+backward vs torch.nn.BatchNorm2d on a ResNet-sized activation.

At world size 1 the module falls back to plain batch norm (Horovod does the same), so the
synchronized path is also timed by calling its autograd function directly ("forced"): that is
the per-step cost the statistics exchange adds, measured without a second GPU. torch's own
nn.SyncBatchNorm skips its sync path at world size 1 too; its autograd function is forced the
same way over a one-rank process group (NCCL; gloo with --cpu), and the two forced paths are
timed interleaved (`d_sync_bn_vs_torch`, per dtype: perseus_us / torch_us is the ratio)."""

import statistics
import time

import torch
from torch.nn.modules import _functions as _torch_bn

import common
import perseus.torch as hvd
from perseus.torch.sync_batch_norm import _SyncBatchNormFunction


def main():
    args = common.parse(__doc__)
    hvd.init()
    dev = common.device_for(args, hvd.local_rank())
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    shape = (4, 16, 8, 8) if args.cpu else (32, 256, 56, 56)
    c = shape[1]
    torch.manual_seed(7 + hvd.rank())
    x = torch.randn(*shape, device=dev, requires_grad=True)
    g = torch.randn(*shape, device=dev)
    plain = torch.nn.BatchNorm2d(c).to(dev)
    sync = hvd.SyncBatchNorm(c).to(dev)

    def step(fn):
        def run():
            x.grad = None
            fn(x).backward(g)
        return run

    def forced(inp):
        return _SyncBatchNormFunction.apply(inp, sync.weight, sync.bias, sync.running_mean,
                                            sync.running_var, sync.eps, 0.1, sync.process_set,
                                            "bench.sync_bn.forced")

    # Correctness: the synchronized function at world size 1 must match plain batch norm, in
    # its output and in every gradient (on CUDA this is the fused-kernel path).
    if hvd.size() == 1:
        got = []
        for fn, mod in ((plain, plain), (forced, sync)):
            x.grad = None
            mod.zero_grad()
            y = fn(x)
            y.backward(g)
            got.append((y.detach(), x.grad.clone(), mod.weight.grad.clone(), mod.bias.grad.clone(),
                        mod.running_mean.clone(), mod.running_var.clone()))
        for what, a, b in zip(("output", "input grad", "weight grad", "bias grad", "running mean",
                               "running var"), *got):
            err = (a - b).abs().max().item() / max(1.0, b.abs().max().item())
            if err > 1e-3:
                common.fail("forced SyncBatchNorm's %s differs from BatchNorm2d's by %g" % (what, err))
    reps = 5 if args.cpu else 20
    t_plain = common.median_us(step(plain), dev, reps)
    t_sync = common.median_us(step(sync), dev, reps)
    t_forced = common.median_us(step(forced), dev, reps)
    if hvd.rank() == 0:
        common.result("d_sync_bn" if hvd.size() == 1 else "e_sync_bn", ranks=hvd.size(),
                      shape="x".join(map(str, shape)), bn2d_us=t_plain, module_us=t_sync,
                      sync_path_us=t_forced, overhead_pct=100.0 * (t_forced / t_plain - 1))
    if hvd.size() == 1:
        versus_torch(args, dev)
    hvd.shutdown()


def interleaved_us(fns, device, reps, warmup=5):
    """Median microseconds of each fn, the fns alternated within every repetition."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    ts = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            common.sync(device)
            t0 = time.perf_counter()
            fn()
            common.sync(device)
            ts[i].append((time.perf_counter() - t0) * 1e6)
    return [statistics.median(t) for t in ts]


def check_same(perseus_step, torch_step, x, dtype):
    """Both forced paths give the same input gradient (and so the same output) on the input."""
    grads = []
    for step in (perseus_step, torch_step):
        step()
        grads.append(x.grad.float())
    err = (grads[0] - grads[1]).abs().max().item() / max(1.0, grads[1].abs().max().item())
    if err > (2e-2 if dtype == torch.bfloat16 else 1e-3):
        common.fail("forced SyncBatchNorm's input grad differs from torch's (%s) by %g"
                    % (dtype, err))


def versus_torch(args, dev):
    """Both forced synchronized paths, fwd+bwd, on the issue's input (N=8, C=256, 56x56)."""
    dist = common.torch_dist_init(args, 0, 1, 29517)
    group = dist.group.WORLD
    shape = (4, 16, 8, 8) if args.cpu else (8, 256, 56, 56)
    c = shape[1]
    dtypes = (torch.float32,) if args.cpu else (torch.float32, torch.bfloat16)
    for dtype in dtypes:
        x = torch.randn(*shape, device=dev, dtype=dtype, requires_grad=True)
        g = torch.randn(*shape, device=dev, dtype=dtype)
        ours = hvd.SyncBatchNorm(c).to(dev)
        theirs = torch.nn.SyncBatchNorm(c).to(dev)

        def run(fn):
            def step():
                x.grad = None
                fn().backward(g)
            return step

        perseus_step = run(lambda: _SyncBatchNormFunction.apply(
            x, ours.weight, ours.bias, ours.running_mean, ours.running_var, ours.eps, 0.1,
            ours.process_set, "bench.sync_bn.vs_torch"))
        torch_step = run(lambda: _torch_bn.SyncBatchNorm.apply(
            x, theirs.weight, theirs.bias, theirs.running_mean, theirs.running_var, theirs.eps,
            0.1, group, 1))
        if not args.cpu:  # torch's sync path has CUDA kernels only
            check_same(perseus_step, torch_step, x, dtype)
        if args.cpu:  # rehearse ours alone
            t_perseus, = interleaved_us([perseus_step], dev, 5)
            common.result("d_sync_bn_vs_torch", dtype=str(dtype).replace("torch.", ""),
                          shape="x".join(map(str, shape)), perseus_us=t_perseus,
                          torch_us="cuda-only")
            continue
        t_perseus, t_torch = interleaved_us([perseus_step, torch_step], dev, 50)
        common.result("d_sync_bn_vs_torch", dtype=str(dtype).replace("torch.", ""),
                      shape="x".join(map(str, shape)), perseus_us=t_perseus, torch_us=t_torch,
                      ratio=t_perseus / t_torch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
