"""One rank of a perseus.mxnet multi-rank test: ``python mx_worker.py <scenario>``.

Started by perseusrun from test_mx_multirank.py. Each scenario asserts on this rank and prints
"SCENARIO OK" at the end; any failure raises (non-zero exit, perseusrun stops the job). Data
is generated from fixed seeds, so every rank can compute the single-process reference itself.
"""
import os
import sys
import tempfile

import mxnet as mx
import numpy as np

import perseus.mxnet as hvd

CHECK = np.testing.assert_allclose


def _expect(exc, fn, match=None):
    try:
        fn()
    except exc as e:
        if match is not None and match not in str(e):
            raise AssertionError("expected %r in %s: %s" % (match, type(e).__name__, e))
        return e
    raise AssertionError("expected %s" % exc.__name__)


# --- Horovod API --------------------------------------------------------------------------
def scenario_api():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    assert hvd.is_initialized() and 0 <= r < n
    assert hvd.local_size() == n and hvd.local_rank() == r  # one host
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0
    base = mx.nd.array(np.arange(6).reshape(2, 3)) + 1
    x = base * (r + 1)
    tri = n * (n + 1) / 2

    CHECK(hvd.allreduce(x, name="avg").asnumpy(), base.asnumpy() * tri / n, rtol=1e-6)
    CHECK(hvd.allreduce(x, op=hvd.Sum, name="sum").asnumpy(), base.asnumpy() * tri)
    CHECK(hvd.allreduce(x, average=False, name="sum_avgflag").asnumpy(), base.asnumpy() * tri)
    CHECK(hvd.allreduce(x, op=hvd.Max, name="max").asnumpy(), base.asnumpy() * n)
    CHECK(hvd.allreduce(x, op=hvd.Min, name="min").asnumpy(), base.asnumpy())
    CHECK(hvd.allreduce(mx.nd.ones(3) * (r + 2), op=hvd.Product, name="prod").asnumpy(),
          np.prod(np.arange(2, n + 2)) * np.ones(3))
    CHECK(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3,
                        name="scaled").asnumpy(), base.asnumpy() * tri * 1.5, rtol=1e-6)
    _expect(ValueError, lambda: hvd.allreduce(x, average=True, op=hvd.Sum))
    _expect(ValueError, lambda: hvd.allreduce(x, op=hvd.Adasum))
    for dtype in ("float16", "float64", "int32", "int64", "uint8"):
        got = hvd.allreduce(mx.nd.ones(4, dtype=dtype), op=hvd.Sum, name="dt." + dtype)
        assert got.dtype == np.dtype(dtype)
        CHECK(got.asnumpy(), n * np.ones(4))

    y = x.copy()
    assert hvd.allreduce_(y, op=hvd.Sum, name="inplace") is y
    CHECK(y.asnumpy(), base.asnumpy() * tri)
    # asynchronous through the engine: consumers queue behind the collective
    z = hvd.allreduce(x, op=hvd.Sum, name="async") * 2 + 1
    CHECK(z.asnumpy(), base.asnumpy() * tri * 2 + 1)
    # unnamed collectives match by issue order; priorities are engine hints
    outs = [hvd.allreduce(mx.nd.ones(5) * i, op=hvd.Sum, priority=-i) for i in range(8)]
    for i, o in enumerate(outs):
        CHECK(o.asnumpy(), n * i * np.ones(5))

    # explicit handles
    h = hvd.allreduce_async(x, op=hvd.Sum, name="h1")
    h2 = hvd.allreduce_async_(x.copy(), name="h2")
    hb = hvd.broadcast_async_(mx.nd.ones(2) * r, root_rank=0, name="hb")
    hg = hvd.grouped_allreduce_async_([mx.nd.ones(2), mx.nd.ones(3)], op=hvd.Sum, name="hg")
    CHECK(hvd.synchronize(h).asnumpy(), base.asnumpy() * tri)
    CHECK(hvd.synchronize(h2).asnumpy(), base.asnumpy() * tri / n, rtol=1e-6)
    CHECK(hvd.synchronize(hb).asnumpy(), [0, 0])
    CHECK(hvd.synchronize(hg)[1].asnumpy(), [n, n, n])
    assert hvd.poll(h) and hvd.poll(hg)

    g = hvd.grouped_allreduce([x, mx.nd.ones(4)], op=hvd.Sum, name="grp")
    CHECK(g[0].asnumpy(), base.asnumpy() * tri)
    CHECK(g[1].asnumpy(), n * np.ones(4))
    gi = [x.copy(), mx.nd.ones(2)]
    assert hvd.grouped_allreduce_(gi, name="grp_") is gi
    CHECK(gi[0].asnumpy(), base.asnumpy() * tri / n, rtol=1e-6)

    ag = hvd.allgather(mx.nd.ones((r + 1, 2)) * r, name="ag")
    assert ag.shape == (tri, 2)
    CHECK(ag.asnumpy()[:, 0], np.concatenate([[k] * (k + 1) for k in range(n)]))
    gag = hvd.grouped_allgather([mx.nd.ones((1, 2)) * r, mx.nd.ones(2) * r], name="gag")
    CHECK(gag[0].asnumpy()[:, 0], np.arange(n))
    CHECK(gag[1].asnumpy(), np.repeat(np.arange(n), 2))

    src = mx.nd.ones((2, 2)) * (r + 10)
    b = hvd.broadcast(src, root_rank=n - 1, name="bc")
    CHECK(b.asnumpy(), np.full((2, 2), n + 9))
    CHECK(src.asnumpy(), np.full((2, 2), r + 10))  # out of place
    assert hvd.broadcast_(src, root_rank=0, name="bc_") is src
    CHECK(src.asnumpy(), np.full((2, 2), 10))

    a2a = hvd.alltoall(mx.nd.array(np.arange(2 * n) + 100 * r), name="a2a")
    CHECK(a2a.asnumpy(), np.concatenate([[2 * r + 100 * k, 2 * r + 1 + 100 * k]
                                         for k in range(n)]))
    splits = [1 + (k == r) for k in range(n)]  # one row to every rank, two to myself
    out, rsplits = hvd.alltoall(mx.nd.ones((n + 1, 2)) * r, splits=splits, name="a2av")
    assert list(rsplits.asnumpy()) == [1 + (k == r) for k in range(n)] or \
        list(rsplits.asnumpy()) == [2 if k == r else 1 for k in range(n)]
    assert out.shape == (n + 1, 2)

    rs = hvd.reducescatter(mx.nd.ones((2 * n, 3)) * (r + 1), op=hvd.Sum, name="rs")
    CHECK(rs.asnumpy(), np.full((2, 3), tri))
    rsa = hvd.reducescatter(mx.nd.ones((n, 2)) * (r + 1), name="rs_avg")
    CHECK(rsa.asnumpy(), np.full((1, 2), tri / n), rtol=1e-6)
    grs = hvd.grouped_reducescatter([mx.nd.ones((n, 1)), mx.nd.ones((2 * n,))], op=hvd.Sum,
                                    name="grs")
    CHECK(grs[0].asnumpy(), np.full((1, 1), n))
    CHECK(grs[1].asnumpy(), np.full((2,), n))
    _expect(ValueError, lambda: hvd.reducescatter(mx.nd.ones(4), op=hvd.Max))

    assert hvd.broadcast_object({"k": [1, r]}, root_rank=0) == {"k": [1, 0]}
    assert hvd.allgather_object(("rank", r)) == [("rank", k) for k in range(n)]

    # process sets: ranks {0, 1}
    ps = hvd.add_process_set([0, 1])
    if r in (0, 1):
        CHECK(hvd.allreduce(mx.nd.ones(2) * (r + 1), op=hvd.Sum, process_set=ps,
                            name="ps").asnumpy(), [3, 3])
    hvd.barrier()
    assert hvd.remove_process_set(ps)

    # broadcast_parameters: dict of NDArrays, ParameterDict, deferred initialisation
    params = {"w": mx.nd.ones(3) * r, "b": mx.nd.ones(1) * (r + 5)}
    hvd.broadcast_parameters(params, root_rank=0)
    CHECK(params["w"].asnumpy(), np.zeros(3))
    CHECK(params["b"].asnumpy(), [5])
    mx.random.seed(r)
    net = mx.gluon.nn.Dense(4, in_units=3)
    net.initialize(mx.init.Uniform())
    hvd.broadcast_parameters(net.collect_params(), prefix="dense.")
    w = hvd.allgather(net.weight.data().reshape((1, -1)), name="dense_w").asnumpy()
    assert all(np.array_equal(w[0], w[k]) for k in range(n))
    lazy = mx.gluon.nn.Dense(2)  # in_units unknown: deferred until the first forward
    lazy.initialize(mx.init.Uniform())
    hvd.broadcast_parameters(lazy.collect_params(), prefix="lazy.")
    lazy(mx.nd.ones((1, 5)))
    w = hvd.allgather(lazy.weight.data().reshape((1, -1)), name="lazy_w").asnumpy()
    assert all(np.array_equal(w[0], w[k]) for k in range(n))

    hvd.barrier()
    last = hvd.join()
    assert 0 <= last < n
    print("api OK", flush=True)


def scenario_errors():
    hvd.init()
    r = hvd.rank()
    # mismatched shapes across ranks: an MXNetError naming the tensor, never a hang
    bad = hvd.allreduce(mx.nd.ones(3 + r), name="mismatch")
    e = _expect(mx.base.MXNetError, bad.asnumpy)
    assert "mismatch" in str(e), e
    _expect(ValueError, lambda: hvd.allreduce([1, 2, 3]), "NDArray")
    kv = hvd.create("dist_sync_perseus")
    _expect(ValueError, lambda: kv.push(3, mx.nd.ones(2)), "not been initialized")
    _expect(ValueError, lambda: kv.pull(3, out=mx.nd.ones(2)), "not been initialized")
    kv.init(3, mx.nd.ones(2))
    _expect(ValueError, lambda: kv.init("w", mx.nd.ones(2)), "Mixed key types")
    _expect(ValueError, lambda: kv.init(3, mx.nd.ones(2)), "duplicate init")
    _expect(ValueError, lambda: kv.set_gradient_compression({"type": "3bit"}))
    _expect(ValueError, lambda: kv.is_capable("fly"))
    kv2 = hvd.create("dist_sync_perseus")
    e = _expect(mx.base.MXNetError, lambda: kv2.init("k", mx.nd.ones(2 + r)))
    assert "kv.init.k" in str(e) and "Mismatch" in str(e), e
    # a rank that leaves: the others' pending collectives fail (MXNetError), never hang
    hvd.barrier()
    if r == 1:
        print("errors OK", flush=True)
        hvd.shutdown()
        sys.exit(0)
    left = hvd.allreduce(mx.nd.ones(4), name="after_peer_left")
    e = _expect(mx.base.MXNetError, left.asnumpy)
    assert "after_peer_left" in str(e), e
    print("errors OK", flush=True)


# --- KVStore ----------------------------------------------------------------------------------
def scenario_kvstore():
    kv = mx.kv.create("dist_sync_perseus")  # registered by `import perseus.mxnet`
    assert isinstance(kv, mx.kvstore.KVStore) and isinstance(kv, mx.kvstore.KVStoreBase)
    for name in ("dist-sync-perseus", "dist_device_sync_perseus"):
        other = hvd.create(name)
        assert "dist" in other.type and "_sync" in other.type
    assert kv.type == "dist_sync_perseus"
    r, n = kv.rank, kv.num_workers
    assert n == hvd.size() and r == hvd.rank()
    assert kv.local_rank == hvd.local_rank() and kv.local_size == hvd.local_size()
    assert kv.is_capable("optimizer")

    # init: rank 0's value wins, everywhere
    kv.init(0, mx.nd.ones((2, 3)) * (r + 7))
    out = mx.nd.zeros((2, 3))
    kv.pull(0, out=out)
    CHECK(out.asnumpy(), np.full((2, 3), 7))
    # push: a list of values is summed on this rank first, then over ranks
    kv.push(0, [mx.nd.ones((2, 3)) * (r + 1), mx.nd.ones((2, 3))])
    kv.pull(0, out=[out, out.copy()])
    CHECK(out.asnumpy(), np.full((2, 3), n * (n + 1) / 2 + n))
    # several keys, list of lists, priorities
    keys = [5, 6, 7]
    kv.init(keys, [mx.nd.zeros(4)] * 3)
    kv.push(keys, [[mx.nd.ones(4) * k] for k in keys], priority=-1)
    outs = [[mx.nd.zeros(4), mx.nd.zeros(4)] for _ in keys]
    kv.pull(keys, out=outs, priority=2)
    for k, o in zip(keys, outs):
        for a in o:
            CHECK(a.asnumpy(), np.full(4, k * n))
    # pushpull in place and to out
    v = mx.nd.ones(4) * (r + 1)
    kv.init(9, mx.nd.zeros(4))
    kv.pushpull(9, v)
    CHECK(v.asnumpy(), np.full(4, n * (n + 1) / 2))
    o = mx.nd.zeros(4)
    kv.pushpull(9, [mx.nd.ones(4), mx.nd.ones(4)], out=o)
    CHECK(o.asnumpy(), np.full(4, 2 * n))
    # broadcast
    outs = [mx.nd.zeros(3), mx.nd.zeros(3)]
    kv.broadcast(11, mx.nd.ones(3) * (r + 3), out=outs)
    for a in outs:
        CHECK(a.asnumpy(), np.full(3, 3))

    # model-parallel pattern (InsightFace): param_only keys, push(op=Max), pull
    mp = hvd.create("dist_sync_perseus")
    mp.set_optimizer(mx.optimizer.SGD(learning_rate=1.0))  # must not touch param_only keys
    mp.init("global_max_fc", mx.nd.zeros(3), param_only=True)
    mp.push("global_max_fc", mx.nd.array([r, -r, 2 * r]), op=hvd.PerseusOp.Max)
    got = mx.nd.zeros(3)
    mp.pull("global_max_fc", out=got)
    CHECK(got.asnumpy(), [n - 1, 0, 2 * (n - 1)])
    mp.init("min_key", mx.nd.zeros(2), param_only=True)
    mp.push("min_key", [mx.nd.array([r, 5]), mx.nd.array([r + 1, 3])], op=hvd.PerseusOp.Min)
    mp.pull("min_key", out=got[:2])
    CHECK(got[:2].asnumpy(), [0, 3])

    # optimizer on the store: summed gradient updates the stored weight identically everywhere
    opt_kv = hvd.create("dist_sync_perseus")
    opt_kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, rescale_grad=1.0 / n))
    opt_kv.init("w", mx.nd.ones(3))
    opt_kv.push("w", mx.nd.ones(3) * (r + 1))
    w = mx.nd.zeros(3)
    opt_kv.pull("w", out=w)
    CHECK(w.asnumpy(), np.full(3, 1 - 0.1 * (n + 1) / 2), rtol=1e-6)
    fname = os.path.join(tempfile.mkdtemp(), "opt.states")
    opt_kv.save_optimizer_states(fname, dump_optimizer=True)
    opt_kv.load_optimizer_states(fname)

    # gradient compression: 2bit with error feedback, fp16
    c = hvd.create("dist_sync_perseus")
    c.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    c.init("g", mx.nd.zeros(3))
    total = np.zeros(3)
    for _ in range(3):
        c.push("g", mx.nd.array([0.3, -0.6, 0.1]))
        c.pull("g", out=got)
        total += got.asnumpy()
    # residuals carry what was not sent: 0.9 -> one 0.5 quantum, -1.8 -> three -0.5
    CHECK(total, n * np.array([0.5, -1.5, 0.0]), atol=1e-6)
    f16 = hvd.create("dist_sync_perseus")
    f16.set_gradient_compression({"type": "fp16"})
    f16.init("h", mx.nd.zeros(2))
    f16.push("h", mx.nd.array([0.25, 1.5]))
    f16.pull("h", out=got[:2])
    CHECK(got[:2].asnumpy(), n * np.array([0.25, 1.5]))
    kv._barrier()

    # PerseusSyncBatchNorm works with only a KVStore created (no hvd.init()), as in fit.py
    sym = mx.sym.contrib.PerseusSyncBatchNorm(mx.sym.var("data"), comm_scope=1, name="kvbn")
    exe = sym.simple_bind(mx.cpu(), data=(2, 3))
    exe.arg_dict["data"][:] = mx.nd.array([[r, 0, 1], [r + 1, 2, 1]])
    exe.forward(is_train=True)
    exe.backward(mx.nd.ones((2, 3)))
    col0 = np.concatenate([[k, k + 1] for k in range(n)]).astype("float64")
    CHECK(exe.outputs[0].asnumpy()[:, 0],
          (np.array([r, r + 1]) - col0.mean()) / np.sqrt(col0.var() + 1e-3), rtol=1e-4)
    print("kvstore OK", flush=True)


# --- Gluon / Module training vs one process on the full batch ----------------------------------
def _data(n_total, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n_total, 10).astype("float32")
    y = (x[:, :3].sum(axis=1) > 0).astype("float32")
    return x, y


def _net(seed=1):
    mx.random.seed(seed)
    net = mx.gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(8, activation="relu", in_units=10),
                mx.gluon.nn.Dense(2, in_units=8))
    net.initialize(mx.init.Xavier())
    return net


def _train(net, trainer, x, y, steps, per_rank, rank, step_batch):
    """`steps` SGD steps; step s uses global rows [s*per_rank*size, (s+1)*per_rank*size), of
    which this rank takes its slice (rank None: the whole global batch)."""
    n = hvd.size()
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for s in range(steps):
        lo = s * per_rank * n
        sl = (slice(lo, lo + per_rank * n) if rank is None
              else slice(lo + rank * per_rank, lo + (rank + 1) * per_rank))
        with mx.autograd.record():
            loss = loss_fn(net(mx.nd.array(x[sl])), mx.nd.array(y[sl]))
        loss.backward()
        trainer.step(step_batch)
    return {k: v.data().asnumpy() for k, v in net.collect_params().items()}


def _same_everywhere(params, tag):
    n = hvd.size()
    for p in params.values():
        w = hvd.allgather(p.data().reshape((1, -1)), name="%s.%s" % (tag, p.name)).asnumpy()
        assert all(np.allclose(w[0], w[k]) for k in range(n)), p.name


def scenario_gluon():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    per, steps = 4, 5
    x, y = _data(per * n * steps)
    ref_net = _net()
    ref = _train(ref_net, mx.gluon.Trainer(ref_net.collect_params(), "sgd",
                                           {"learning_rate": 0.5, "momentum": 0.9},
                                           kvstore=None),
                 x, y, steps, per, None, per * n)

    # DistributedTrainer: per-rank batch in step(); averaging is in the trainer
    net = _net(seed=100 + r)  # different start on every rank: broadcast_parameters fixes it
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    _same_everywhere(net.collect_params(), "bcast")
    ref_start = _net()  # then start from the reference's initial weights on every rank
    for (k, p), (_, q) in zip(sorted(net.collect_params().items()),
                              sorted(ref_start.collect_params().items())):
        p.set_data(q.data())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": 0.5, "momentum": 0.9})
    got = _train(net, trainer, x, y, steps, per, r, per)
    for k in ref:
        CHECK(got[k], ref[k], rtol=1e-4, atol=1e-5)

    # gluon.Trainer with the Perseus store: sums, so step() takes the global batch
    for update_on_kvstore, kv in ((False, hvd.create("dist_sync_perseus")),
                                  (True, hvd.create("dist_sync_perseus")),
                                  (None, "dist_sync_perseus")):  # by name, via mx.kv.create
        net2 = _net()
        tr = mx.gluon.Trainer(net2.collect_params(), "sgd",
                              {"learning_rate": 0.5, "momentum": 0.9}, kvstore=kv,
                              update_on_kvstore=update_on_kvstore)
        got2 = _train(net2, tr, x, y, steps, per, r, per * n)
        for k in ref:
            CHECK(got2[k], ref[k], rtol=1e-4, atol=1e-5)

    # two trainers (a GAN) need prefixes; fp16 compression and grouped mode run
    g_net, d_net = _net(3), _net(4)
    g_tr = hvd.DistributedTrainer(g_net.collect_params(), "sgd", {"learning_rate": 0.1},
                                  prefix="G", compression=hvd.Compression.fp16)
    d_tr = hvd.DistributedTrainer(d_net.collect_params(), "sgd", {"learning_rate": 0.1},
                                  prefix="D", num_groups=1)
    _train(g_net, g_tr, x, y, 2, per, r, per)
    _train(d_net, d_tr, x, y, 2, per, r, per)
    for net_, tag in ((g_net, "G"), (d_net, "D")):
        _same_everywhere(net_.collect_params(), tag)

    # DistributedOptimizer with a plain Trainer(kvstore=None)
    net3 = _net()
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
    tr3 = mx.gluon.Trainer(net3.collect_params(), opt, kvstore=None)
    got3 = _train(net3, tr3, x, y, steps, per, r, per)
    for k in ref:
        CHECK(got3[k], ref[k], rtol=1e-4, atol=1e-5)
    print("gluon OK", flush=True)


def _module_fit(kv, x, y, batch, seed):
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(net, num_hidden=2, name="fc2")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    it = mx.io.NDArrayIter(x, y, batch, label_name="softmax_label")
    mod = mx.mod.Module(net, context=mx.cpu())
    mx.random.seed(seed)
    mod.fit(it, num_epoch=2, kvstore=kv, optimizer="sgd",
            optimizer_params={"learning_rate": 0.5, "momentum": 0.9},
            initializer=mx.init.Xavier())
    arg, _ = mod.get_params()
    return {k: v.asnumpy() for k, v in arg.items()}


def scenario_module():
    kv = hvd.create("dist_sync_perseus")
    r, n = kv.rank, kv.num_workers
    per, steps = 4, 4
    x, y = _data(per * n * steps)
    # the reference sees the concatenation of the ranks' batches, batch by batch
    order = np.concatenate([np.arange(s * per * n, (s + 1) * per * n) for s in range(steps)])
    ref = _module_fit(None, x[order], y[order], per * n, seed=5)
    mine = np.concatenate([np.arange(s * per * n + r * per, s * per * n + (r + 1) * per)
                           for s in range(steps)])
    got = _module_fit(kv, x[mine], y[mine], per, seed=5 + r)  # init differs: rank 0's wins
    for k in ref:
        CHECK(got[k], ref[k], rtol=1e-4, atol=1e-5)
    print("module OK", flush=True)


# --- SyncBatchNorm ------------------------------------------------------------------------------
def _fake_hosts(hosts):
    """Pretend ranks sit on `hosts` machines (before init): contiguous blocks of ranks."""
    n, r = int(os.environ["PERSEUS_SIZE"]), int(os.environ["PERSEUS_RANK"])
    per = n // hosts
    os.environ.update(PERSEUS_HOSTNAME="fakehost%d" % (r // per),
                      PERSEUS_LOCAL_RANK=str(r % per), PERSEUS_LOCAL_SIZE=str(per),
                      PERSEUS_CROSS_RANK=str(r // per), PERSEUS_CROSS_SIZE=str(hosts))


def _bn_reference(x, dy, gamma, beta):
    bn = mx.gluon.nn.BatchNorm(in_channels=x.shape[1])
    bn.initialize()
    bn.gamma.set_data(mx.nd.array(gamma))
    bn.beta.set_data(mx.nd.array(beta))
    return _bn_step(bn, x, dy)


def _bn_step(blk, x, dy):
    xx = mx.nd.array(x)
    xx.attach_grad()
    with mx.autograd.record():
        out = blk(xx)
    out.backward(mx.nd.array(dy))
    return dict(y=out.asnumpy(), dx=xx.grad.asnumpy(), dgamma=blk.gamma.grad().asnumpy(),
                dbeta=blk.beta.grad().asnumpy(), mean=blk.running_mean.data().asnumpy(),
                var=blk.running_var.data().asnumpy())


def scenario_syncbn():
    hosts = int(os.environ.get("FAKE_HOSTS", "1"))
    if hosts > 1:
        _fake_hosts(hosts)
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    assert hvd.local_size() == n // hosts
    sizes = [1 + (k % 3) for k in range(n)]  # unequal batches
    if n >= 3:
        sizes[1] = 0 if os.environ.get("EMPTY_RANK") else sizes[1]
    rng = np.random.RandomState(0)
    c = 3
    x = rng.randn(sum(sizes), c, 2, 3).astype("float32") * 2 + 1
    dy = rng.randn(*x.shape).astype("float32")
    gamma, beta = rng.rand(c) + 0.5, rng.randn(c)
    bounds = np.cumsum([0] + sizes)

    def group_of(rank, scope):
        if scope == 1:
            return list(range(n))
        per = n // hosts
        return list(range(rank // per * per, rank // per * per + per))

    for scope in (1, 0):
        members = group_of(r, scope)
        lo, hi = bounds[members[0]], bounds[members[-1] + 1]
        ref = _bn_reference(x[lo:hi], dy[lo:hi], gamma, beta)
        for hybridize in (False, True):
            blk = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=c, comm_scope=scope,
                                                          prefix="sbn%d%d_" % (scope, hybridize))
            blk.initialize()
            blk.gamma.set_data(mx.nd.array(gamma))
            blk.beta.set_data(mx.nd.array(beta))
            if hybridize:
                blk.hybridize()
            if sizes[r] == 0:
                mx.util.set_np_shape(True)
            got = _bn_step(blk, x[bounds[r]:bounds[r + 1]], dy[bounds[r]:bounds[r + 1]])
            mx.util.set_np_shape(False)
            s = slice(bounds[r] - lo, bounds[r + 1] - lo)
            CHECK(got["y"], ref["y"][s], atol=1e-4)
            CHECK(got["dx"], ref["dx"][s], atol=1e-4)
            CHECK(got["mean"], ref["mean"], atol=1e-5)
            CHECK(got["var"], ref["var"], atol=1e-5)
            # parameter gradients are per-rank shares: their sum over the group is BatchNorm's
            total = hvd.allreduce(mx.nd.array(np.concatenate([got["dgamma"], got["dbeta"]])),
                                  op=hvd.Sum, process_set=0 if scope == 1 else -1,
                                  name="sbn.grads.%d.%d" % (scope, hybridize)).asnumpy()
            CHECK(total, np.concatenate([ref["dgamma"], ref["dbeta"]]), rtol=1e-4, atol=1e-4)

    # the symbol API (Module-style graphs), global scope
    data = mx.sym.var("data")
    sym = mx.sym.contrib.PerseusSyncBatchNorm(data=data, fix_gamma=False, eps=1e-5, ndev=1,
                                              comm_scope=1, name="symbn")
    if all(k > 0 for k in sizes):  # every rank must take part
        exe = sym.simple_bind(mx.cpu(), data=(sizes[r], c, 2, 3))
        exe.arg_dict["data"][:] = x[bounds[r]:bounds[r + 1]]
        exe.arg_dict["symbn_gamma"][:] = gamma
        exe.arg_dict["symbn_beta"][:] = beta
        exe.aux_dict["symbn_moving_var"][:] = 1
        exe.forward(is_train=True)
        exe.backward(mx.nd.array(dy[bounds[r]:bounds[r + 1]]))
        ref = _bn_reference(x, dy, gamma, beta)
        s = slice(bounds[r], bounds[r + 1])
        CHECK(exe.outputs[0].asnumpy(), ref["y"][s], atol=1e-4)
        CHECK(exe.grad_dict["data"].asnumpy(), ref["dx"][s], atol=1e-4)
        CHECK(exe.aux_dict["symbn_moving_mean"].asnumpy(), ref["mean"], atol=1e-5)
    print("syncbn OK", flush=True)


def scenario_segfault():
    """Rank 1 crashes in native code while rank 0 waits for it in an allreduce."""
    import ctypes
    hvd.init()
    hvd.allreduce(mx.nd.ones((4,)), name="before").wait_to_read()
    if hvd.rank() == 1:
        print("crashing", flush=True)
        ctypes.string_at(0)  # a read of address 0: SIGSEGV
    try:
        hvd.allreduce(mx.nd.ones((4,)), name="after").wait_to_read()
    except Exception as e:  # noqa: BLE001 (the test reads the message)
        print("rank 0 raised %s: %s" % (type(e).__name__, e), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    import faulthandler
    # a hang is a bug: dump every thread's stack (then exit) well before the test's timeout
    faulthandler.dump_traceback_later(float(os.environ.get("MX_WORKER_HANG_S", "80")),
                                      exit=True)
    globals()["scenario_" + sys.argv[1]]()
