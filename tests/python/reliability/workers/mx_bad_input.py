"""Bad input through perseus.mxnet on 2 ranks: a clear error on every rank (naming the tensor
where a name exists), within a bounded time, and the job goes on working after each case.
Errors of asynchronous operations surface where MXNet surfaces them (wait_to_read /
asnumpy) as MXNetError carrying Perseus's message."""

import time

import mxnet as mx
import numpy as np

import perseus.mxnet as hvd
import relcommon as rc

ANY = (ValueError, RuntimeError, mx.base.MXNetError)


class Cases:
    def __init__(self, res):
        self.res = res
        self.failures = []

    def expect(self, case, fn, must_mention=None):
        t0 = time.time()
        try:
            out = fn()
            if isinstance(out, mx.nd.NDArray):
                out.wait_to_read()
        except ANY as e:
            took = time.time() - t0
            self.res.report(case=case, outcome="raised", type=type(e).__name__,
                            message=str(e)[:400], seconds=took)
            if must_mention and must_mention not in str(e):
                self.failures.append("%s: message does not name %r: %s" % (case, must_mention, e))
            if took > 20:
                self.failures.append("%s: took %.1f s" % (case, took))
            return
        self.res.report(case=case, outcome="no error", seconds=time.time() - t0)
        self.failures.append("%s: no error" % case)

    def works(self, case):
        out = hvd.allreduce(mx.nd.ones(5), average=False, name="works.after." + case)
        if not np.array_equal(out.asnumpy(), np.full(5, float(hvd.size()), np.float32)):
            self.failures.append("after %s: wrong allreduce %s" % (case, out))


def main():
    args = rc.parse()
    res = rc.Results(args.results)
    c = Cases(res)
    c.expect("before init: allreduce", lambda: hvd.allreduce(mx.nd.ones(2)))
    c.expect("before init: broadcast", lambda: hvd.broadcast(mx.nd.ones(2), 0))
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    c.expect("shape mismatch", lambda: hvd.allreduce(mx.nd.ones(2 + rank), name="mx.shape"),
             "mx.shape")
    c.works("shape")
    c.expect("dtype mismatch", lambda: hvd.allreduce(
        mx.nd.ones(2, dtype="float32" if rank == 0 else "float64"), name="mx.dtype"), "mx.dtype")
    c.expect("op mismatch", lambda: hvd.allreduce(
        mx.nd.ones(2), average=(rank == 0), name="mx.op"), "mx.op")
    c.expect("root mismatch", lambda: hvd.broadcast(mx.nd.ones(2), rank, name="mx.root"),
             "mx.root")
    c.works("mismatches")
    c.expect("alltoall splits sum != rows", lambda: hvd.alltoall(
        mx.nd.arange(6), splits=[2, 2], name="mx.a2a"), "mx.a2a")
    c.expect("root out of range", lambda: hvd.broadcast(mx.nd.ones(2), size, name="mx.rr"))
    c.expect("unsupported dtype", lambda: hvd.allreduce(mx.nd.ones(2, dtype="int16"),
                                                        name="mx.int16"))
    c.expect("sparse input", lambda: hvd.allreduce(
        mx.nd.ones((2, 2)).tostype("row_sparse"), name="mx.sparse"))
    c.expect("not an NDArray", lambda: hvd.allreduce(np.ones(2), name="mx.numpy"))
    c.works("all bad input")

    hvd.shutdown()
    c.expect("after shutdown: allreduce", lambda: hvd.allreduce(mx.nd.ones(2)))
    res.report(case="summary", outcome="ok" if not c.failures else "failed",
               failures=c.failures)
    if c.failures:
        raise SystemExit("FAILED:\n  " + "\n  ".join(c.failures))
    print("PASS bad_input", flush=True)


if __name__ == "__main__":
    main()
