"""PerseusBackend: torch.distributed's c10d Backend interface over the Perseus engine.

The operations live in PerseusOps, which has no torch base: PerseusBackend puts them on c10d's
Backend, and on torch releases that cannot build a Python Backend, PerseusProcessGroup puts
them on c10d's ProcessGroup (_process_group.py).

Each override validates, submits one core call on the group's process set and returns a
PerseusWork. Ranks inside the backend are the group's ranks, which are the set's ranks (both
are sorted global ranks; unsorted groups are refused at creation).

Note [Collective names]: the engine matches collectives across ranks by name. torch gives
none, so a call is named by its group, kind, dtype and element count, with a counter per such
signature that wraps at _NAME_CYCLE (the element count only where every rank gives the
same). Ranks make the same calls in the same order, so they make the same names; a training
step's calls repeat the same names, which lets the engine post them without negotiation (Note
[Posted collectives]). A name still in flight when its turn comes again waits for it first."""

import datetime
import itertools
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllreduceOptions, Backend

from perseus.common import basics
from perseus.common.exceptions import (DuplicateNameError, InvalidArgumentError,
                                       PerseusInternalError)
from perseus.torch import _tensors as _t
from perseus.torch import mpi_ops
from perseus.torch.distributed import _engine, _groups, _p2p, _reduce, _shrink
from perseus.torch.distributed._movement import DataMovement
from perseus.torch.distributed._work import PerseusWork, done_work

_NAME_CYCLE = 64  # a power of two
_NAME_MASK = _NAME_CYCLE - 1
_NATIVE = _t.NATIVE
_CORE_DTYPE = _t.CORE_DTYPE
_CODE_DTYPE = {code: dtype for dtype, code in _CORE_DTYPE.items()}
_STRIDED = torch.strided
_plain_op = _reduce.plain_op
_op_key, _plain_by_key = _reduce.op_key, _reduce.PLAIN_BY_KEY.get
_capsule = _t.capsule
# Whether torch tells a backend that its caller waits at once (Note [Blocking calls]).
_HAS_ASYNC_OP = hasattr(AllreduceOptions(), "asyncOp")
# The extension's blocking allreduce for this backend (Note [Blocking calls]): where torch tells
# a backend that its caller waits, hashes a ReduceOp as its RedOpType's value and gives its
# tensors the DLPack exchange API that the extension reads them through.
_FAST_BLOCKING = (_HAS_ASYNC_OP and _reduce.op_key is hash
                  and hasattr(torch.Tensor, "__dlpack_c_exchange_api__"))
# torch's raw getter of a device's current CUDA stream (as _tensors.current_stream_ptr), by index.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(cuda_tensor):
    if _raw_stream is not None:
        return _raw_stream(cuda_tensor.get_device())
    return _t.current_stream_ptr(cuda_tensor.device)


def _signature_names(group_label, kind, dtype, count):
    """The _NAME_CYCLE names of a signature (Note [Collective names])."""
    base = "pt.%s.%s.%s.%d." % (group_label, kind, str(dtype)[6:], count)
    return [base + str(i) for i in range(_NAME_CYCLE)]


def _signature_key(dtype, count):
    """A _NameCycles key: count * 16 + the core's code of the dtype where it has one (an int,
    which the blocking call's C entry builds alike, and which unlike a tuple is no object for
    the garbage collector), else (dtype, count)."""
    code = _CORE_DTYPE.get(dtype)
    return (dtype, count) if code is None else count * 16 + code


class _NameCycles(dict):
    """_signature_key -> an endless iterator over that allreduce signature's names:
    `next(cycles[key])` is the next name, in one expression, because the blocking allreduce is
    the per-call floor."""

    def __init__(self, group_label):
        super().__init__()
        self._group_label = group_label

    def __missing__(self, key):
        dtype, count = key if isinstance(key, tuple) else (_CODE_DTYPE[key & 15], key >> 4)
        cycle = self[key] = itertools.cycle(_signature_names(self._group_label, "allreduce",
                                                             dtype, count))
        return cycle


class PerseusOps(DataMovement):
    """The perseus group's operations, over the torch base its subclass names (Backend or
    ProcessGroup), whose constructor takes (rank, size) and which gives rank() and size()."""

    def __init__(self, rank, size, global_ranks, process_set, group_name, timeout_s, store):
        super().__init__(rank, size)
        self._ps = process_set
        self._ranks = list(global_ranks)
        self.global_rank = self._ranks[rank]
        self.group_label = str(group_name)  # torch's group name; ProcessGroup owns .group_name
        self.timeout_s = timeout_s
        self._store = store
        self._names = {}
        # One name cycle per allreduce signature for the blocking and the submitted paths, so
        # that a rank's calls are numbered alike whichever path each takes.
        self._allreduce_names = _NameCycles(self.group_label)
        self._core = basics.core()
        self._completed = done_work(self, "collective", [])  # Note [Blocking calls]
        # _direct(): the extension with torch.Tensor's exchange API registered, which it reads
        # the tensor through.
        self._dist_allreduce = (getattr(mpi_ops._direct(), "dist_allreduce", None)
                                if _FAST_BLOCKING else None)
        self._fast = (self._allreduce_names, _reduce.PLAIN_BY_KEY, process_set, self._completed)
        self.is_default_group = False  # set by the creator: this group's shutdown stops Perseus
        self._job = _engine.job()  # unless the group was shrunk since (Note [Shrinking])
        self._p2p = _p2p.PointToPoint(self)

    # -- identity ---------------------------------------------------------------------------

    def name(self):
        return "perseus"

    def getBackendName(self):
        return "perseus"

    def _get_backend_name(self):
        return "perseus"

    @property
    def supports_splitting(self):
        return True

    @property
    def supports_shrinking(self):
        return True  # the default group's only (Note [Shrinking] in _shrink.py)

    @property
    def options(self):
        """What split_group copies into its groups (torch's base property would call back into
        this one)."""
        return Backend.Options("perseus", datetime.timedelta(seconds=self.timeout_s))

    @property
    def supports_coalescing(self):
        return False

    def eager_connect_single_device(self, device=None):
        pass  # the engine connected every rank when the job formed

    def perform_nocolor_split(self, device=None):
        pass  # sets are made on every rank by the group hook (Note [Groups as process sets])

    # -- submission helpers ---------------------------------------------------------------

    def _name(self, kind, t, sized=True):
        """sized=False for ops whose ranks may give different sizes (allgather, alltoall...)."""
        key = (kind, t.dtype, t.numel() if sized else -1)
        entry = self._names.get(key)
        if entry is None:
            entry = self._names[key] = self._names_of(key)
        n = entry[1]
        entry[1] = n + 1
        return entry[0][n & _NAME_MASK]

    def _names_of(self, key):
        """[the _NAME_CYCLE names of a signature (kind, dtype, count), the next call's number]."""
        return [_signature_names(self.group_label, *key), 0]

    def _submit(self, name, call):
        """call(name) -> core handle; a name still in flight is waited for first."""
        try:
            return call(name)
        except DuplicateNameError:
            pass
        # Its last use was submitted by every rank before this one, so it completes.
        deadline = time.monotonic() + self.timeout_s
        while True:
            time.sleep(0.0002)
            try:
                return call(name)
            except DuplicateNameError:
                if time.monotonic() > deadline:
                    raise

    def _work(self, kind, handle, outputs, finish, t):
        dev = t.device if t.is_cuda else None
        return PerseusWork(self, kind, handle, outputs, finish, dev)

    def _root(self, root, what):
        if not 0 <= root < self.size():
            raise InvalidArgumentError("perseus: %s: root %d is not a rank of this group of %d"
                                       % (what, root, self.size()))
        return root

    # -- allreduce ------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        # Note [Blocking calls]: a caller that waits at once (dist.all_reduce without async_op)
        # gets a Work that is complete already. The extension's dist_allreduce makes the call
        # for a contiguous CPU or CUDA tensor and a plain op, by address (no capsule, no
        # handle); a CUDA call returns once the current stream waits on the collective, as the
        # Work's wait() would make it (no host block for the GPU work). It is the per-call
        # floor, so it is one C call; what it leaves (NotImplemented) takes the path below.
        if self._dist_allreduce is not None:
            try:
                done = self._dist_allreduce(tensors, opts, self._fast)
            except PerseusInternalError as e:
                raise PerseusWork(self, "allreduce", None, tensors)._fail(e) from e
            if done is not NotImplemented:
                if done.__class__ is str:  # that name's last use is still in flight
                    op = _plain_by_key(_op_key(opts.reduceOp))
                    return self._allreduce_async(tensors[0], op, 1.0, done, tensors, True)
                return done
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts)
        t = tensors[0]
        blocking = _HAS_ASYNC_OP and opts is not None and not opts.asyncOp
        if blocking and t.layout is _STRIDED and t.is_contiguous() and (t.is_cpu or t.is_cuda):
            dtype = t.dtype
            code = _CORE_DTYPE.get(dtype)
            op = _plain_by_key(_op_key(opts.reduceOp))
            if code is not None and op is not None:
                name = next(self._allreduce_names[t.numel() * 16 + code])
                try:
                    if t.is_cpu:
                        self._core.allreduce_inplace(name, t.data_ptr(), code, t.shape, op, 1.0,
                                                     1.0, self._ps)
                    else:
                        self._core.allreduce_on_stream(name, t.data_ptr(), code, t.shape, op,
                                                       1.0, 1.0, self._ps, t.get_device(),
                                                       _current_stream(t))
                    return self._completed
                except DuplicateNameError:  # that name's last use is still in flight
                    return self._allreduce_async(t, op, 1.0, name, tensors, False)
                except PerseusInternalError as e:
                    raise PerseusWork(self, "allreduce", None, tensors)._fail(e) from e
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        op, pre = _plain_op(reduce_op), 1.0
        if op is None:
            op, pre = _reduce.core_op(reduce_op, "allreduce")
        if t.dtype not in _NATIVE or t.is_sparse:
            _t.check_reducible(t, "allreduce", self.group_label)
        name = next(self._allreduce_names[_signature_key(t.dtype, t.numel())])
        return self._allreduce_async(t, op, pre, name, tensors, blocking)

    def _allreduce_async(self, t, op, pre, name, tensors, blocking):
        """Submits; the Work waits (CUDA: the current stream waits on the collective's event).
        blocking: the caller waits at once, so a CUDA call's stream waits now (Note [Blocking
        calls])."""
        src = t if t.is_contiguous() else t.contiguous()
        cuda = src.is_cuda
        stream = _current_stream(src) if cuda else 0
        try:
            h = self._core.allreduce(name, _capsule(src), None, op, pre, 1.0, self._ps, stream)
        except DuplicateNameError:  # that name's last use is still in flight
            core, ps = self._core, self._ps
            h = self._submit(name, lambda n: core.allreduce(
                n, _capsule(src), None, op, pre, 1.0, ps, stream))
        if src is not t:
            return PerseusWork(self, "allreduce", h, tensors, lambda: t.copy_(src), src.device
                               if cuda else None)
        if blocking and cuda:
            try:
                h.cuda_stream_wait(stream)
                return self._completed
            except Exception:  # noqa: BLE001 (the Work's wait() reports it, by the group's rules)
                work = PerseusWork(self, "allreduce", h, tensors, None, src.device)
                work.wait()
                return work
        return PerseusWork(self, "allreduce", h, tensors, None, src.device if cuda else None)

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            return done_work(self, "allreduce_coalesced", tensors)
        op, pre = _reduce.core_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                                  "allreduce_coalesced")
        for t in tensors:
            _t.check_reducible(t, "allreduce_coalesced", self.group_label)
        srcs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        core = basics.core()
        ps, stream = self._ps, _t.stream_of(srcs[0])
        h = self._submit(self._name("allreduce_coalesced.%d" % len(srcs), srcs[0]),
                         lambda n: core.grouped_allreduce(n, [_t.capsule(s) for s in srcs], None,
                                                          op, pre, 1.0, ps, stream))

        def finish():
            for t, s in zip(tensors, srcs):
                if s is not t:
                    t.copy_(s)
        return self._work("allreduce_coalesced", h, tensors, finish, tensors[0])

    # -- broadcast / reduce -----------------------------------------------------------------

    def broadcast(self, tensors, opts):
        t = tensors[0]
        root = self._root(opts.rootRank, "broadcast")
        wire, restore = _t.to_wire(t, "broadcast", self.group_label)
        core = basics.core()
        ps, stream = self._ps, _t.stream_of(wire)
        h = self._submit(self._name("broadcast", wire), lambda n: core.broadcast(
            n, _t.capsule(wire), None, root, ps, stream))
        same = wire.data_ptr() == t.data_ptr() and t.is_contiguous() and wire.dtype == t.dtype
        finish = None if same else (lambda: t.copy_(restore(wire)))
        return self._work("broadcast", h, tensors, finish, t)

    def reduce(self, tensors, opts):
        t = tensors[0]
        root = self._root(opts.rootRank, "reduce")
        op, pre = _reduce.core_op(opts.reduceOp, "reduce")
        _t.check_reducible(t, "reduce", self.group_label)
        src = t.contiguous()
        out = torch.empty_like(src)
        core = basics.core()
        ps, stream = self._ps, _t.stream_of(src)
        h = self._submit(self._name("reduce", t), lambda n: core.allreduce(
            n, _t.capsule(src), _t.capsule(out), op, pre, 1.0, ps, stream))
        finish = (lambda: t.copy_(out)) if self.rank() == root else None
        return self._work("reduce", h, tensors, finish, t)

    # -- barrier / point to point ---------------------------------------------------------

    def barrier(self, opts=None):
        h = basics.core().barrier(self._ps)
        return PerseusWork(self, "barrier", h, [])

    def send(self, tensors, dst, tag):
        return self._p2p.send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._p2p.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        raise dist.DistBackendError("perseus: recv from any source is not supported; name the "
                                    "source rank (dist.recv(tensor, src=...))")

    # -- groups ---------------------------------------------------------------------------

    def split(self, store, ranks, opts=None):
        """split_group: every rank of this group passes its new group's ranks (ranks of this
        group); a rank in none of them passes the first. All groups are made alike on every
        rank: their ranks are allgathered first."""
        if self._ps != 0:
            raise dist.DistBackendError(
                "perseus: split_group of a subgroup is not supported; split the default group")
        size = self.size()
        mask = torch.zeros(size, dtype=torch.uint8)
        mask[list(ranks)] = 1
        mask[self.rank()] += 2  # marks whether this rank is in the group it names
        h = basics.core().allgather(self._name("split", mask), _t.capsule(mask), 0, 0)
        h.wait(self.timeout_s)
        masks = _t.library_output(h, 0).view(size, size)
        groups = []
        for row in masks.tolist():
            group = tuple(i for i, m in enumerate(row) if m & 1)
            if group not in groups:
                groups.append(group)
        for g in groups:
            _groups.set_for([self._ranks[i] for i in g])
        mine = tuple(sorted(ranks))
        if self.rank() not in mine:
            return None
        timeout_s = _engine.options_seconds(opts, self.timeout_s)
        global_ranks = [self._ranks[i] for i in mine]
        group_name = getattr(opts, "group_name", "") or "%s:split:%s" % (self.group_label, mine)
        return type(self)(mine.index(self.rank()), len(mine), global_ranks,
                          _groups.known_set(global_ranks), group_name, timeout_s, store)

    def shrink(self, excluded, flags=0, opts=None):
        """shrink_group, on the remaining ranks: a new backend for them (Note [Shrinking])."""
        return _shrink.shrink(self, excluded, flags, opts)

    # -- lifetime ---------------------------------------------------------------------------

    def shutdown(self):
        if self.is_default_group and self._job == _engine.job():
            from perseus.torch.distributed import _work
            _groups.forget()
            _engine.stop(self.timeout_s)
            _work.shutdown_pool()

    def abort(self):
        self.shutdown()


class PerseusBackend(PerseusOps, Backend):
    """The perseus group's backend for each of its devices (torch releases that let Python
    construct a c10d Backend)."""
