"""DistributedOptimizer and DistributedTrainer (Horovod 0.28 horovod.mxnet semantics).

Gradients are summed with in-place allreduces (prescaled by 1/gradient_predivide_factor) and the
division by the number of ranks goes into the optimizer's rescale_grad, which is cheaper than
averaging in the collective and gives the same update.

num_groups=0 (Horovod: one allreduce per gradient) submits one grouped allreduce per dtype
instead: the same sums, but one MXNet engine push, one GIL round trip on the engine's worker
thread and one completion per group rather than per tensor, which makes a step with tens of
gradients an order of magnitude cheaper (`bench/training/mxnet_train_bench.py` measures it).
"""
import warnings
from collections import OrderedDict

import mxnet as mx
import numpy as np

from . import _basics
from .compression import Compression
from .mpi_ops import Sum, allgather, allreduce_, grouped_allreduce_


def _set_size(process_set):
    return _basics.set_size(process_set)


def _split(items, num_groups):
    n = len(items)
    bounds = [n * g // num_groups for g in range(num_groups + 1)]
    return [items[bounds[g]:bounds[g + 1]] for g in range(num_groups) if bounds[g] < bounds[g + 1]]


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an MXNet optimizer so that every update first sums the gradient over the ranks.
    For the Module API and for gluon.Trainer(..., kvstore=None)."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=_basics.global_process_set):
        # No Optimizer.__init__: every attribute is the wrapped optimizer's (__getattr__).
        self._optimizer = optimizer
        self._process_set = process_set
        self._gradient_predivide_factor = float(gradient_predivide_factor)
        self._num_groups = int(num_groups)
        self._optimizer.rescale_grad *= self._gradient_predivide_factor / _set_size(process_set)

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def __setattr__(self, item, value):
        # gluon.Trainer writes rescale_grad and param_dict on the optimizer it is given: they
        # must reach the wrapped one, which does the update.
        if item.startswith("_"):
            object.__setattr__(self, item, value)
        else:
            setattr(self._optimizer, item, value)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def _do_allreduce(self, index, grad):
        if _set_size(self._process_set) == 1:
            return
        pre = 1.0 / self._gradient_predivide_factor
        if isinstance(index, (tuple, list)):
            if self._num_groups > 0:
                pairs = list(zip(index, grad))
                for group in _split(pairs, self._num_groups):
                    grouped_allreduce_([g for _, g in group], op=Sum,
                                       name="%s:%s" % (group[0][0], group[-1][0]),
                                       priority=-group[0][0] if isinstance(group[0][0], int)
                                       else 0, prescale_factor=pre,
                                       process_set=self._process_set)
            else:
                # One grouped push per dtype (see the module docstring).
                by_dtype = OrderedDict()
                for i, g in zip(index, grad):
                    by_dtype.setdefault(str(g.dtype), []).append((i, g))
                for group in by_dtype.values():
                    grouped_allreduce_([g for _, g in group], op=Sum,
                                       name="%s:%s" % (group[0][0], group[-1][0]),
                                       priority=-group[0][0] if isinstance(group[0][0], int)
                                       else 0, prescale_factor=pre,
                                       process_set=self._process_set)
        else:
            allreduce_(grad, op=Sum, name=str(index), prescale_factor=pre,
                       process_set=self._process_set)

    def update(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon.Trainer whose step() sums the gradients over the ranks (no kvstore).

    prefix: names this trainer's collectives; needed when a job has two trainers (a GAN).
    compression: Compression.none or Compression.fp16 (gradients travel as float16).
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=_basics.global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer does not take DistributedOptimizer as its "
                          "optimizer. We have unwrapped it for you.")
        # The same order on every rank: collective names and priorities follow it.
        if isinstance(params, dict):
            params = OrderedDict(sorted(params.items()))
        elif isinstance(params, (list, tuple)):
            params = sorted(params, key=lambda p: p.name)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._process_set = process_set
        self._gradient_predivide_factor = float(gradient_predivide_factor)
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("DistributedTrainer: prefix must be a str, not %r" % (prefix,))
        self._prefix = prefix or ""
        self._num_groups = int(num_groups)
        # rescale_grad = _scale / batch_size: dividing _scale by the rank count averages.
        self._scale *= self._gradient_predivide_factor / _set_size(process_set)

    def _allreduce_grads(self):
        if _set_size(self._process_set) == 1:
            return
        pre = 1.0 / self._gradient_predivide_factor
        entries = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
        sparse = [(i, p) for i, p in entries if p.list_grad()[0].stype == "row_sparse"]
        for i, p in sparse:  # an Embedding(sparse_grad=True): Horovod's layer has no such path
            _sum_row_sparse(p.list_grad()[0], "%s%d.rsp" % (self._prefix, i), pre,
                            self._process_set)
        entries = [(i, p) for i, p in entries if p.list_grad()[0].stype != "row_sparse"]
        # num_groups=0: one group per dtype (see the module docstring).
        num_groups = self._num_groups if self._num_groups > 0 else 1
        if entries:
            by_dtype = OrderedDict()
            for i, p in entries:
                by_dtype.setdefault(str(p.list_grad()[0].dtype), []).append((i, p))
            for group_entries in by_dtype.values():
                for group in _split(group_entries, num_groups):
                    grads = [p.list_grad()[0] for _, p in group]
                    compressed = [self._compression.compress(g) for g in grads]
                    grouped_allreduce_([c for c, _ in compressed], op=Sum,
                                       name="%s%d:%d" % (self._prefix, group[0][0], group[-1][0]),
                                       priority=-group[0][0], prescale_factor=pre,
                                       process_set=self._process_set)
                    self._restore(grads, compressed)

    def _restore(self, grads, compressed):
        if self._compression is Compression.none:
            return
        for grad, (c, ctx) in zip(grads, compressed):
            if c is not grad:
                grad[:] = self._compression.decompress(c, ctx)


def _sum_row_sparse(grad, name, prescale, process_set):
    """Sums a row_sparse gradient over the ranks in place: every rank's row indices and rows
    are allgathered (as Horovod's torch layer does for sparse gradients) and rows that several
    ranks touched are added."""
    indices = allgather(grad.indices.astype("int64"), name=name + ".indices",
                        process_set=process_set).asnumpy()
    rows = allgather(grad.data * prescale if prescale != 1.0 else grad.data,
                     name=name + ".values", process_set=process_set).asnumpy()
    unique, where = np.unique(indices, return_inverse=True)
    summed = np.zeros((len(unique),) + rows.shape[1:], dtype=rows.dtype)
    np.add.at(summed, where, rows)
    mx.nd.sparse.row_sparse_array((summed, unique), shape=grad.shape,
                                  ctx=grad.context, dtype=grad.dtype).copyto(grad)

