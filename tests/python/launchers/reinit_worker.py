"""Started by each launcher under test: init(), an allreduce, shutdown(), then init() again in
the same process, which must give the same rank and size and a working job; prints
'REINIT rank size first second'. --api mxnet goes through perseus.mxnet instead of
perseus.torch."""
import sys

api = sys.argv[sys.argv.index("--api") + 1] if "--api" in sys.argv else "torch"
if api == "mxnet":
    import mxnet as mx
    import perseus.mxnet as hvd

    def total(value):
        return hvd.allreduce(mx.nd.array([value]), average=False, name="v").asnumpy()[0]
else:
    import torch
    import perseus.torch as hvd

    def total(value):
        return hvd.allreduce(torch.tensor([value]), op=hvd.Sum, name="v").item()

hvd.init()
before = (hvd.rank(), hvd.size())
first = total(float(hvd.rank() + 1))
hvd.shutdown()
try:
    hvd.rank()
except ValueError as e:
    assert "shut down" in str(e), e
else:
    raise AssertionError("rank() after shutdown() did not raise")
hvd.init()
assert (hvd.rank(), hvd.size()) == before, ((hvd.rank(), hvd.size()), before)
second = total(float(hvd.rank() + 10))
print("REINIT %d %d %g %g" % (before + (first, second)), flush=True)
hvd.shutdown()
