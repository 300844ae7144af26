"""DistributedOptimizer (horovod.torch.DistributedOptimizer): gradients are allreduced as
soon as backward produces them, overlapping communication with the rest of backward, and
step() waits for them."""

import contextlib
import os
import warnings

import torch

from perseus.common import basics
from perseus.common.ops import Adasum, Average
from perseus.common.exceptions import UnsupportedError
from perseus.common.process_sets import global_process_set
from perseus.torch import mpi_ops as _ops
from perseus.torch.adasum_optimizer import _DistributedAdasumOptimizer
from perseus.torch.compression import Compression
from perseus.torch.optimizer_parameters import count_backward_pass, parameter_names


class _DistributedOptimizer(torch.optim.Optimizer):
    # Mixed into a dynamic subclass of the user's optimizer class (see DistributedOptimizer),
    # so super(self.__class__, self) is the user's optimizer.
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        all_params = [v for group in self.param_groups for v in group["params"]]
        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for v in all_params}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}  # param or tuple(params) of a group -> (handle, ctx)
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        self._groups = self._make_groups(groups, all_params)
        self._group_ready = {}
        # As Horovod: a rank outside process_set trains locally (no hooks, no allreduce). An
        # elastic job (HOROVOD_ELASTIC=1) may grow past size 1 later, so it always hooks.
        grows = os.environ.get("HOROVOD_ELASTIC") == "1"
        if (basics.size() > 1 or grows) and (process_set.process_set_id == 0
                                             or process_set.included()):
            self._register_hooks()

    @staticmethod
    def _make_groups(groups, all_params):
        """param -> tuple of its group's params (grouped_allreduce), or {} without groups."""
        if groups is None or groups == 0:
            return {}
        trainable = [p for p in all_params if p.requires_grad]
        if isinstance(groups, int):
            n = max(1, min(groups, len(trainable)))
            chunks = [tuple(trainable[i::n]) for i in range(n)]
        else:
            chunks = [tuple(g) for g in groups]
        mapping = {}
        for chunk in chunks:
            for p in chunk:
                mapping[p] = chunk
        return mapping

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                if hasattr(p, "register_post_accumulate_grad_hook"):
                    self._hook_handles.append(
                        p.register_post_accumulate_grad_hook(self._make_hook(p)))
                else:  # torch < 2.1: the grad accumulator node
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    self._hook_handles.append(acc.register_hook(self._make_hook(p)))
                    self._hook_handles.append(acc)  # keep the node alive

    def _make_hook(self, p):
        def hook(*_ignored):
            if count_backward_pass(self, p):
                group = self._groups.get(p)
                if group is None:
                    self._handles[p] = self._allreduce_grad_async(p)
                else:
                    ready = self._group_ready.setdefault(group, set())
                    ready.add(p)
                    if len(ready) == len(group):
                        del self._group_ready[group]
                        self._handles[group] = self._grouped_allreduce_async(group)
            elif p not in self._handles:
                self._handles[p] = (None, None)
        return hook

    def _scale_factors(self):
        if self.op == Average:
            # Split the average across pre/post scaling; the core still divides by size.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _prepare_grad(self, p):
        if p.grad is None:  # a parameter unused this step: every rank must still submit it
            p.grad = torch.zeros_like(p)
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                raise UnsupportedError("sparse gradient of '%s' in a group: grouped allreduce "
                                       "takes dense tensors; use sparse_as_dense=True or no "
                                       "groups" % self._parameter_names.get(p))
            # As Horovod: a dense copy travels; p.grad stays sparse for optimizers that need it
            # (SparseAdam), and _apply puts the result back into it as a sparse tensor.
            grad = grad.to_dense()
        return self._compression.compress(grad)

    def _allreduce_grad_async(self, p):
        if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
            # As Horovod: the indices and values of every rank are allgathered (a callable
            # handle builds the summed sparse gradient).
            return _ops.sparse_allreduce_async(p.grad, name=self._parameter_names.get(p),
                                               op=self.op, process_set=self.process_set), None
        compressed, ctx = self._prepare_grad(p)
        pre, post = self._scale_factors()
        handle = _ops.allreduce_async_(compressed, name=self._parameter_names.get(p), op=self.op,
                                       prescale_factor=pre, postscale_factor=post,
                                       process_set=self.process_set)
        return handle, (compressed, ctx)

    def _grouped_allreduce_async(self, group):
        pairs = [self._prepare_grad(p) for p in group]
        pre, post = self._scale_factors()
        name = "grouped." + self._parameter_names.get(group[0])
        handle = _ops.grouped_allreduce_async_([c for c, _ in pairs], name=name, op=self.op,
                                               prescale_factor=pre, postscale_factor=post,
                                               process_set=self.process_set)
        return handle, pairs

    def synchronize(self):
        """Waits for every gradient allreduce; submits those backward did not produce."""
        if self.process_set.process_set_id != 0 and not self.process_set.included():
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in sorted(self._requires_update - done, key=lambda q: self._parameter_names[q]):
            group = self._groups.get(p)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
            elif group not in self._handles:
                self._handles[group] = self._grouped_allreduce_async(group)
        self._group_ready.clear()
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)
        for key, (handle, ctx) in self._handles.items():
            output = handle() if callable(handle) else _ops.synchronize(handle)
            if isinstance(key, tuple):
                for p, out, (_, cctx) in zip(key, output, ctx):
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    self._apply(p, out, cctx)
            else:
                self._allreduce_delay[key] = self.backward_passes_per_step
                if ctx is None:  # sparse: the handle built the aggregated gradient
                    key.grad.zero_().add_(output)
                else:
                    self._apply(key, output, ctx[1])
        self._handles.clear()
        self._synchronized = True

    def _apply(self, p, output, cctx):
        grad = self._compression.decompress(output, cctx)
        if p.grad.is_sparse:  # sparse_as_dense: back to sparse before the step, as Horovod
            p.grad.zero_().add_(grad if grad.is_sparse else grad.to_sparse())
        elif grad.data_ptr() != p.grad.data_ptr():
            p.grad.copy_(grad)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() yourself)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                # Horovod's text, which users grep their logs for.
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code. (Perseus: the "
                              "gradients were allreduced again before this step.)")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def _forget_pending(self):
        """Drops the gradient allreduces in flight: after an elastic reset they belong to a
        membership that failed and will never complete (hvd.elastic's TorchState calls it)."""
        self._handles.clear()
        self._group_ready.clear()
        self._allreduce_delay = {p: self.backward_passes_per_step for p in self._allreduce_delay}
        self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so gradients are averaged (op) over the ranks before step().

    named_parameters: model.named_parameters(), for readable and stable tensor names.
    backward_passes_per_step: local accumulation steps before each allreduce.
    gradient_predivide_factor: averaging split as 1/f before and f/size after the sum.
    op=Adasum (more than one rank): each parameter steps locally and the steps' deltas are
    combined by an Adasum allreduce, as Horovod's delta optimizer.
    groups: an int (that many grouped allreduces) or lists of parameters to reduce together.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum and basics.size() > 1:
        if process_set.process_set_id != 0:
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of lists of "
                         "torch.Tensor")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
