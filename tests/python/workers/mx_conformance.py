"""Horovod 0.28 behaviours of perseus.mxnet that a program written for horovod.mxnet relies on.
Runs on 2 or 3 ranks; prints 'PASS <check>' per check."""

import json
import os

import mxnet as mx
import numpy as np

import perseus.mxnet as hvd
from checks import expect, run_checks


def check_launcher_env(rank, size):
    assert int(os.environ["HOROVOD_RANK"]) == rank
    assert int(os.environ["HOROVOD_SIZE"]) == size
    assert int(os.environ["HOROVOD_LOCAL_RANK"]) == hvd.local_rank()
    assert int(os.environ["RANK"]) == rank and int(os.environ["WORLD_SIZE"]) == size


def check_import_paths(rank, size):
    import perseus.mxnet.horovod as aiacc_hvd
    assert aiacc_hvd is hvd


def check_global_root_rank(rank, size):
    members = list(range(1, size))
    root = size - 1
    ps = hvd.add_process_set(members)
    try:
        if rank in members:
            out = hvd.broadcast(mx.nd.ones(3) * rank, root, name="g.b", process_set=ps)
            np.testing.assert_allclose(out.asnumpy(), np.full(3, root))
            y = mx.nd.ones(3) * rank
            hvd.broadcast_(y, root, name="g.b_", process_set=ps)
            np.testing.assert_allclose(y.asnumpy(), np.full(3, root))
            assert hvd.broadcast_object({"r": rank}, root_rank=root, process_set=ps) == {"r": root}
            e = expect(ValueError, hvd.broadcast, mx.nd.ones(1), 0, process_set=ps)
            assert "not a member" in str(e)
    finally:
        mx.nd.waitall()
        hvd.remove_process_set(ps)


def check_exception_types(rank, size):
    assert hvd.HorovodInternalError is hvd.PerseusInternalError
    e = expect(RuntimeError, hvd.reducescatter, mx.nd.ones(size), op=hvd.Adasum)
    assert isinstance(e, hvd.HorovodInternalError)
    expect(ValueError, hvd.allreduce, mx.nd.ones(2), average=True, op=hvd.Sum)


def check_alltoall_return_shapes(rank, size):
    x = mx.nd.arange(size * 2)
    out = hvd.alltoall(x, name="a2a.nosplits")
    assert isinstance(out, mx.nd.NDArray) and out.shape == (size * 2,)
    out, received = hvd.alltoall(x, splits=[2] * size, name="a2a.splits")
    np.testing.assert_array_equal(received.asnumpy(), [2] * size)
    out, received = hvd.alltoall(x, splits=mx.nd.array([2] * size, dtype="int32"),
                                 name="a2a.int32")
    np.testing.assert_array_equal(received.asnumpy(), [2] * size)
    # Splits that are not 32-bit integers are refused before anything is sent, as Horovod.
    for bad in (mx.nd.array([2] * size, dtype="float32"), np.full(size, 2, dtype=np.int64),
                [2.0] * size):
        e = expect(ValueError, hvd.alltoall, x, splits=bad, name="a2a.bad")
        assert "splits" in str(e), str(e)


def check_build_queries(rank, size):
    v = hvd.nccl_built()
    assert isinstance(v, int) and ((v > 20000) if hvd.cuda_built() else v == 0)
    assert hvd.mpi_enabled() is False and hvd.gloo_built() is False
    assert hvd.gloo_enabled() is False and hvd.ccl_built() is False


def check_timeline(rank, size):
    path = os.path.join(os.environ["CONFORMANCE_TMP"], "mx_timeline.json")
    hvd.start_timeline(path)
    hvd.allreduce(mx.nd.ones(4), name="mx.timeline").wait_to_read()
    hvd.stop_timeline()
    with open(path[:-len(".json")] + ".%d.json" % rank) as f:
        events = json.load(f)
    assert "mx.timeline" in [e.get("args", {}).get("name") for e in events]


def check_sparse_arrays_are_refused_clearly(rank, size):
    rsp = mx.nd.ones((4, 2)).tostype("row_sparse")
    e = expect(ValueError, hvd.allreduce, rsp)
    assert "tostype('default')" in str(e), str(e)


def check_trainer_row_sparse_gradients(rank, size):
    # Embedding(sparse_grad=True): each rank touches row rank % 4; the summed-then-averaged
    # row_sparse gradient updates every touched row.
    emb = mx.gluon.nn.Embedding(4, 2, sparse_grad=True)
    emb.initialize(mx.init.One())
    trainer = hvd.DistributedTrainer(emb.collect_params(), "sgd", {"learning_rate": 1.0})
    with mx.autograd.record():
        loss = emb(mx.nd.array([rank % 4])).sum()
    loss.backward()
    assert emb.weight.grad().stype == "row_sparse"
    trainer.step(1)
    want = np.ones((4, 2), dtype=np.float32)
    for r in range(size):
        want[r % 4] -= 1.0 / size
    np.testing.assert_allclose(emb.weight.data().asnumpy(), want, rtol=1e-6)



def check_join_average(rank, size):
    # As perseus.torch: while one rank has joined, Average divides by the full set size,
    # integers truncated toward zero, for a small and a large (shared-memory) tensor.
    for joined in range(size):
        if rank != joined:
            for dtype in ("int32", "int64", "float32"):
                for shape in ((2, 3), (300, 1000)):
                    n = shape[0] * shape[1]
                    t = np.resize(np.array([75, 71, -94], dtype=dtype), n).reshape(shape)
                    got = hvd.allreduce(mx.nd.array(t, dtype=dtype), op=hvd.Average,
                                        name="join.avg.%d.%s.%d" % (joined, dtype, n)).asnumpy()
                    total = t * (size - 1)
                    if dtype == "float32":  # scaled in float32, as Horovod
                        want = total * np.float32(1.0 / size)
                    else:  # scaled in double, truncated toward zero
                        want = np.trunc(total.astype(np.float64) * (1.0 / size)).astype(dtype)
                    np.testing.assert_array_equal(got, want)
        last = hvd.join()
        assert last != joined and 0 <= last < size, (joined, last)


CHECKS = [check_launcher_env, check_import_paths, check_global_root_rank, check_exception_types,
          check_alltoall_return_shapes, check_build_queries, check_timeline,
          check_sparse_arrays_are_refused_clearly, check_trainer_row_sparse_gradients,
          check_join_average]


def _settle():
    mx.nd.waitall()
    hvd.barrier()


def main():
    hvd.init()
    run_checks(CHECKS, hvd.rank(), hvd.size(), _settle)


if __name__ == "__main__":
    main()
