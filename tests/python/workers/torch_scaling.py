"""prescale_factor/postscale_factor give Horovod's exact bits, compared bitwise with the rule
computed by torch operations on the same tensors: integers are scaled in float64 and truncated
toward zero; float16 on a GPU is multiplied in float16 by the factor rounded to float16;
float16 on the CPU (and bfloat16) in float32; float32 and float64 in their own type.
argv[1]: "cpu" or "cuda". Prints 'PASS <check>' per check."""

import sys

import torch

import perseus.torch as hvd

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
PRE, POST = 1.0 / 3, 1.7  # neither is a float16: the rounding of the factor shows
DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64]
if DEVICE == "cpu":
    DTYPES.append(torch.bfloat16)


def _device():
    if DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())


def scaled(x, factor):
    """Horovod's scaling of x by factor (x on the device it is reduced on)."""
    if not x.dtype.is_floating_point:
        return (x.double() * factor).trunc().to(x.dtype)
    if x.dtype == torch.float16 and x.is_cuda:
        # Horovod casts the factor to float, then to half, and multiplies two halves.
        return x * torch.tensor(factor, dtype=torch.float32).half().to(x.device)
    if x.dtype in (torch.float16, torch.bfloat16):
        return (x.float() * torch.tensor(factor, dtype=torch.float32)).to(x.dtype)
    return x * torch.tensor(factor, dtype=x.dtype, device=x.device)


def summed(p, size):
    """The sum of `size` equal contributions p, rounded once (exact for 1, 2 and 4 ranks; for
    3, 2p is exact and one rounding follows, in any order of the sum)."""
    if not p.dtype.is_floating_point:
        return p * size
    wide = torch.float64 if p.dtype in (torch.float32, torch.float64) else torch.float32
    return (p.to(wide) * size).to(p.dtype)


def expected(x, size, op, pre, post):
    if op == hvd.Average:
        post = post / size  # Horovod folds the average into the postscale, in float64
    return scaled(summed(scaled(x, pre), size), post)


def sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        x = torch.randint(0, 40, shape, generator=g)
    elif not dtype.is_floating_point:
        x = torch.randint(-40, 40, shape, generator=g)
    else:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 10
    return x.to(dtype).to(_device())


def _same(got, want, what):
    assert got.dtype == want.dtype and got.device == want.device, (what, got, want)
    assert torch.equal(got.cpu().view(-1), want.cpu().view(-1)), (
        what, got.flatten()[:6].tolist(), want.flatten()[:6].tolist())


def check_allreduce(rank, size):
    for i, dtype in enumerate(DTYPES):
        for op in (hvd.Sum, hvd.Average):
            for shape in ((7,), (3000, 5)):  # one alone, one large (the kernel's vector path)
                x = sample(dtype, shape, i)  # every rank the same tensor: sums stay exact
                got = hvd.allreduce(x, op=op, prescale_factor=PRE, postscale_factor=POST,
                                    name="scale.ar.%s.%d.%d" % (dtype, op, shape[0]))
                _same(got, expected(x, size, op, PRE, POST), ("allreduce", dtype, op, shape))
        xs = [sample(dtype, (5,), i), sample(dtype, (9,), i + 1)]
        outs = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=PRE, postscale_factor=POST,
                                     name="scale.gar.%s" % dtype)
        for x, got in zip(xs, outs):
            _same(got, expected(x, size, hvd.Sum, PRE, POST), ("grouped_allreduce", dtype))


def check_reducescatter(rank, size):
    for i, dtype in enumerate(DTYPES):
        for op in (hvd.Sum, hvd.Average):
            x = sample(dtype, (size * 3, 4), i)
            got = hvd.reducescatter(x, op=op, prescale_factor=PRE, postscale_factor=POST,
                                    name="scale.rs.%s.%d" % (dtype, op))
            want = expected(x, size, op, PRE, POST)[rank * 3:(rank + 1) * 3]
            _same(got, want, ("reducescatter", dtype, op))
        xs = [sample(dtype, (size * 2,), i), sample(dtype, (size, 3), i + 1)]
        outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, prescale_factor=PRE,
                                         postscale_factor=POST, name="scale.grs.%s" % dtype)
        for x, got in zip(xs, outs):
            rows = x.shape[0] // size
            want = expected(x, size, hvd.Sum, PRE, POST)[rank * rows:(rank + 1) * rows]
            _same(got, want, ("grouped_reducescatter", dtype))


def main():
    hvd.init()
    if DEVICE == "cuda":
        torch.cuda.set_device(_device())
    for check in (check_allreduce, check_reducescatter):
        check(hvd.rank(), hvd.size())
        print("PASS", check.__name__, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
