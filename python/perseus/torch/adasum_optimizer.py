"""DistributedOptimizer(op=Adasum) over more than one rank: Horovod's delta optimizer. As soon
as backward has a parameter's gradient, the wrapped optimizer steps that parameter alone from
where it started, and the step it took (the delta) is combined over the ranks by an Adasum
allreduce; step() adds the combined delta to the starting point."""

import contextlib

import torch

from perseus.common.ops import Adasum
from perseus.torch import mpi_ops as _ops
from perseus.torch.optimizer_parameters import count_backward_pass, parameter_names


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    # Mixed into a dynamic subclass of the user's optimizer class, so super(self.__class__,
    # self) is the user's optimizer.
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        all_params = [v for group in self.param_groups for v in group["params"]]
        self._allreduce_delay = {v: backward_passes_per_step for v in all_params}
        self._handles = {}
        self._requires_update = set()
        self._hook_handles = []
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for p in all_params}
        for p in all_params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                self._requires_update.add(p)
                self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _allreduce_delta_async(self, p):
        # The wrapped optimizer steps p alone: the other parameters leave its groups meanwhile.
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p.data)
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        p.data.sub_(start)  # p now holds the delta of this step
        compressed, ctx = self._compression.compress(p.data)
        handle = _ops.allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum)
        return handle, (compressed, ctx)

    def _make_hook(self, p):
        def hook(*_ignored):
            handle, ctx = None, None
            if count_backward_pass(self, p):
                handle, ctx = self._allreduce_delta_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to wait for before step(): the deltas are combined in step(), as Horovod."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # never reached: the yield makes this function a context manager

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in sorted(self._requires_update - set(self._handles),
                        key=lambda q: self._parameter_names[q]):
            self._handles[p] = self._allreduce_delta_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step backward passes
                handle, ctx = self._allreduce_delta_async(p)
            _, cctx = ctx
            delta = self._compression.decompress(_ops.synchronize(handle), cctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def _forget_pending(self):
        """Drops the delta allreduces in flight after an elastic reset (TorchState calls it)."""
        self._handles.clear()
        self._allreduce_delay = {p: self.backward_passes_per_step for p in self._allreduce_delay}

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)
