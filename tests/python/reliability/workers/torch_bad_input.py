"""Bad input through perseus.torch on 2 ranks: every case raises a clear error on every rank
within a bounded time, and the job goes on working after each one. Complements
tests/python/workers/torch_errors.py (shape/dtype/op/root mismatches, duplicate names) with
calls before init and after shutdown, process-set mismatches, alltoall splits that do not add
up, non-contiguous inputs of every collective and more unsupported dtypes.

Each case is recorded (name, outcome, exception type, message, seconds) in results/."""

import time

import torch

import perseus.torch as hvd
import relcommon as rc
from perseus.common.exceptions import MismatchError, PerseusInternalError

BOUND_S = 20.0  # a case that takes longer than this is a hang


class Cases:
    def __init__(self, res):
        self.res = res
        self.failures = []

    def expect(self, case, exc, fn, *args, **kwargs):
        t0 = time.time()
        try:
            fn(*args, **kwargs)
        except exc as e:
            took = time.time() - t0
            self.res.report(case=case, outcome="raised", type=type(e).__name__,
                            message=str(e)[:400], seconds=took)
            if took > BOUND_S:
                self.failures.append("%s: took %.1f s" % (case, took))
            return e
        except Exception as e:  # noqa: BLE001
            self.res.report(case=case, outcome="wrong exception", type=type(e).__name__,
                            message=str(e)[:400], seconds=time.time() - t0)
            self.failures.append("%s: %s instead of %s: %s" % (case, type(e).__name__, exc, e))
            return e
        self.res.report(case=case, outcome="no error", seconds=time.time() - t0)
        self.failures.append("%s: no error" % case)

    def works(self, case):
        """The job still runs a correct collective."""
        out = hvd.allreduce(torch.ones(5), op=hvd.Sum, name="works.after." + case)
        if not torch.equal(out, torch.full((5,), float(hvd.size()))):
            self.failures.append("after %s: wrong allreduce %s" % (case, out))


def bounded(handle):
    """synchronize() with a deadline: a case that would hang fails the worker instead."""
    deadline = time.time() + BOUND_S
    while not hvd.poll(handle):
        if time.time() > deadline:
            raise SystemExit("HANG: an operation did not complete within %.0f s" % BOUND_S)
        time.sleep(0.01)
    return hvd.synchronize(handle)


def main():
    args = rc.parse(lambda p: p.add_argument("--psmix", action="store_true"))
    res = rc.Results(args.results)
    c = Cases(res)
    t = torch.ones(3)
    for name, fn in [("allreduce", lambda: hvd.allreduce(t)),
                     ("broadcast", lambda: hvd.broadcast(t, 0)),
                     ("allgather", lambda: hvd.allgather(t)),
                     ("alltoall", lambda: hvd.alltoall(t)),
                     ("barrier", hvd.barrier), ("join", hvd.join)]:
        c.expect("before init: " + name, ValueError, fn)

    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # Process sets: the same name on different sets (its own job: see test_bad_input.py).
    ps = hvd.add_process_set([0, 1])  # same members as the global set, another id
    if args.psmix:
        c.expect("same name, different process sets", MismatchError, bounded,
                 hvd.allreduce_async(torch.ones(2), name="ps.mix",
                                     process_set=ps if rank == 1 else hvd.global_process_set))
        c.works("process set mismatch")
    single = hvd.add_process_set([0])
    if rank == 1:
        c.expect("not a member of the process set", ValueError, hvd.allreduce, torch.ones(2),
                 name="ps.notmember", process_set=single)

    # alltoall splits that do not add up (on every rank), negative, wrong count.
    x = torch.arange(6.0)
    c.expect("alltoall splits sum != rows", ValueError, hvd.alltoall, x,
             splits=torch.tensor([2, 2]), name="a2a.sum")
    c.expect("alltoall negative split", ValueError, hvd.alltoall, x,
             splits=torch.tensor([7, -1]), name="a2a.neg")
    c.expect("alltoall wrong number of splits", ValueError, hvd.alltoall, x,
             splits=torch.tensor([2, 2, 2]), name="a2a.count")
    c.works("alltoall splits")

    # Non-contiguous inputs: copied (correct results) or a clear error, never garbage.
    nc = torch.arange(12.0).reshape(3, 4).t()
    out = hvd.allgather(nc, name="nc.gather")
    if not torch.equal(out, torch.cat([nc] * size)):
        c.failures.append("non-contiguous allgather: wrong result")
    b = (torch.arange(12.0).reshape(3, 4) * (rank + 1)).t()
    hvd.broadcast_(b, 0, name="nc.bcast")
    if not torch.equal(b, torch.arange(12.0).reshape(3, 4).t()):
        c.failures.append("non-contiguous broadcast_: wrong result %s" % b)
    a2a = hvd.alltoall(torch.arange(8.0).reshape(2, 4).t() + 100 * rank, name="nc.a2a")
    if isinstance(a2a, tuple):  # (output, received_splits), as Horovod >= 0.26
        a2a = a2a[0]
    expect = torch.cat([(torch.arange(8.0).reshape(2, 4).t() + 100 * r)[2 * rank:2 * rank + 2]
                        for r in range(size)])
    if not torch.equal(a2a, expect):
        c.failures.append("non-contiguous alltoall: wrong result %s" % a2a)
    rs = hvd.reducescatter(torch.arange(8.0).reshape(2, 4).t(), op=hvd.Sum, name="nc.rs")
    if not torch.equal(rs, (torch.arange(8.0).reshape(2, 4).t() * size)[2 * rank:2 * rank + 2]):
        c.failures.append("non-contiguous reducescatter: wrong result %s" % rs)
    res.report(case="non-contiguous inputs", outcome="correct results")

    # Dtypes without arithmetic in Perseus: reductions refuse them before any communication;
    # broadcast and allgather move their bytes, which must arrive intact.
    for dt in (torch.complex64, torch.complex128, torch.int16):
        c.expect("allreduce %s" % dt, ValueError, hvd.allreduce, torch.ones(2, dtype=dt))
        c.expect("reducescatter %s" % dt, ValueError, hvd.reducescatter,
                 torch.ones(2, dtype=dt))
        v = (torch.arange(4) + 10 * rank).to(dt)
        got = hvd.allgather(v, name="move.ag.%s" % dt)
        if not torch.equal(got, torch.cat([(torch.arange(4) + 10 * r).to(dt)
                                           for r in range(size)])):
            c.failures.append("allgather %s: wrong bytes %s" % (dt, got))
        got = hvd.broadcast(v, 1, name="move.bc.%s" % dt)
        if not torch.equal(got, (torch.arange(4) + 10).to(dt)):
            c.failures.append("broadcast %s: wrong bytes %s" % (dt, got))
        res.report(case="allgather/broadcast %s" % dt, outcome="correct results")
    c.expect("root out of range", ValueError, hvd.broadcast, torch.ones(2), size,
             name="root.range")
    c.expect("root differs", RuntimeError, hvd.broadcast, torch.ones(2), rank, name="root.diff")
    c.expect("allgather rank-differing trailing dims", RuntimeError, hvd.allgather,
             torch.ones(2, 2 + rank), name="gather.dims")
    c.expect("reducescatter shape mismatch", RuntimeError, hvd.reducescatter,
             torch.ones(4 + 2 * rank), name="rs.shape")
    c.works("all bad input")

    hvd.shutdown()
    # Horovod raises ValueError (not initialized); Perseus's ShutDownError says what to do.
    after = (ValueError, PerseusInternalError)
    c.expect("after shutdown: allreduce", after, hvd.allreduce, torch.ones(2))
    c.expect("after shutdown: broadcast", after, hvd.broadcast, torch.ones(2), 0)
    res.report(case="summary", outcome="ok" if not c.failures else "failed",
               failures=c.failures)
    if c.failures:
        raise SystemExit("FAILED:\n  " + "\n  ".join(c.failures))
    print("PASS bad_input", flush=True)


if __name__ == "__main__":
    main()
