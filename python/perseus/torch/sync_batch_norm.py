"""SyncBatchNorm: batch statistics over every rank of a process set.

Statistics are count-weighted: each rank contributes (sum, sum of squares, count) in one
allreduce, so unequal and empty per-rank batches give exactly BatchNorm over the concatenated
batch. Backward allreduces (sum dy, sum dy*(x-mean)) in one more. Pure torch ops (no private
ATen kernels), so it runs on CPU and GPU alike. Weight and bias gradients stay local, as in
torch.nn.SyncBatchNorm; DistributedOptimizer averages them like any other gradient."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from perseus.common import basics
from perseus.common.ops import Sum
from perseus.common.process_sets import global_process_set
from perseus.torch import mpi_ops as _ops

_names = {}


def _allreduce_sum(tensor, name, process_set):
    return _ops.synchronize(_ops.allreduce_async(tensor, name=name, op=Sum,
                                                 process_set=process_set))


def _channels_first(x):
    """(N, C, *) -> (C, N * prod(*)) as a view when possible."""
    c = x.shape[1]
    return x.transpose(0, 1).reshape(c, -1)


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set,
                name):
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        xc = _channels_first(x).to(acc)
        count = torch.full((1,), xc.shape[1], dtype=acc, device=x.device)
        stats = torch.cat([xc.sum(1), (xc * xc).sum(1), count])
        stats = _allreduce_sum(stats, name + ".stats", process_set)
        c = x.shape[1]
        total = stats[-1]
        if total.item() == 0:
            raise ValueError("SyncBatchNorm '%s': every rank has an empty batch" % name)
        mean = stats[:c] / total
        var = (stats[c:2 * c] / total - mean * mean).clamp_(min=0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            n = total.item()
            unbiased = var * (n / (n - 1)) if n > 1 else var
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x.to(acc) - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.to(acc).view(shape) + bias.to(acc).view(shape)
        ctx.save_for_backward(x, weight, mean, invstd, total)
        ctx.process_set = process_set
        ctx.name = name
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, mean, invstd, total = ctx.saved_tensors
        acc = mean.dtype
        c = x.shape[1]
        shape = [1, c] + [1] * (x.dim() - 2)
        dy = _channels_first(grad_y.contiguous()).to(acc)
        xmu = _channels_first(x).to(acc) - mean.view(c, 1)
        local = torch.cat([dy.sum(1), (dy * xmu).sum(1)])
        sums = _allreduce_sum(local, ctx.name + ".grad", ctx.process_set)
        mean_dy = sums[:c] / total
        mean_dy_xmu = sums[c:] / total
        scale = invstd if weight is None else invstd * weight.to(acc)
        gx = (grad_y.to(acc) - mean_dy.view(shape)
              - (x.to(acc) - mean.view(shape)) * (invstd * invstd * mean_dy_xmu).view(shape))
        gx = (gx * scale.view(shape)).to(x.dtype)
        gw = gb = None
        if weight is not None:
            gw = (local[c:] * invstd).to(weight.dtype)
            gb = local[:c].to(weight.dtype)
        return gx, gw, gb, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm{1,2,3}d / torch.nn.SyncBatchNorm whose training-mode
    statistics cover every rank of `process_set`. In eval mode it is plain BatchNorm."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set
        index = _names.get(num_features, 0)
        _names[num_features] = index + 1
        # Layers are created in the same order on every rank, so these names match.
        self._name = "sync_batch_norm.%d.%d" % (num_features, index)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def _set_size(self):
        if self.process_set.process_set_id == 0:
            return basics.size()
        return self.process_set.size()

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or self._set_size() == 1:
            return super().forward(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.eps, momentum, self.process_set, self._name)
