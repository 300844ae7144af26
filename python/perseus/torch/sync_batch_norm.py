"""SyncBatchNorm: batch statistics over every rank of a process set.

Statistics are count-weighted: each rank contributes (sum, sum of squares, count) in one
allreduce, so unequal and empty per-rank batches give exactly BatchNorm over the concatenated
batch. Backward allreduces (sum dy, sum dy*(x-mean)) in one more. Weight and bias gradients
stay local, as in torch.nn.SyncBatchNorm; DistributedOptimizer averages them like any other
gradient.

Speed: the work is passes over the activation. On CUDA the local parts run in torch's fused
batch-norm kernels (torch.batch_norm_stats / _elemt / _backward_reduce / _backward_elemt, the
ones torch.nn.SyncBatchNorm and Horovod use): one pass each. Elsewhere (CPU) they are plain
torch ops: reductions over the batch and spatial dimensions in place (var_mean, sum over
dims) rather than on a channels-first copy, per-channel factors folded before the elementwise
passes: the fused kernels beat the plain ops, and both beat a channels-first copy, whose extra
pass over the activation costs more than the reductions it simplifies
(`python bench/gpu/sync_bn.py` compares them with torch.nn.BatchNorm2d)."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from perseus.common import basics
from perseus.common.exceptions import UnsupportedError
from perseus.common.ops import Sum
from perseus.common.process_sets import global_process_set, process_set_id
from perseus.torch import _tensors as _t
from perseus.torch import mpi_ops as _ops

_names = {}


def _allreduce_sum_(tensor, name, process_set):
    """In place: a contiguous CPU tensor goes to the core directly, with no handle."""
    return _ops.allreduce_blocking_(tensor, name=name, op=Sum, process_set=process_set)


def _allreduce_sum_on_stream_(tensor, name, process_set):
    """In place, for a CUDA tensor: the current stream waits for the collective on the GPU and
    the host does not. The blocking call would wait on the host for the GPU work that produced
    the tensor, leaving the GPU idle while the host then launches the rest of the pass. The host
    waits only until the engine has enqueued the work (and with it released the name, so the
    next step may reuse it); the handle keeps the tensor alive until the GPU is done."""
    stream = _t.current_stream_ptr(tensor.device)
    handle = _ops._direct().allreduce(name, _t.capsule(tensor), None, _CORE_SUM, 1.0, 1.0,
                                      process_set_id(process_set), stream)
    try:
        handle.cuda_stream_wait(stream)
    except UnsupportedError:  # the engine completed it on the host
        handle.wait()
    return tensor


_CORE_SUM = 0  # perseus_reduce_op PERSEUS_SUM


def _batch_dims(x):
    """Every dimension but the channels (dim 1)."""
    return [0] + list(range(2, x.dim()))


def _per_channel(v, x):
    """A (C,) vector shaped to broadcast over x (N, C, *)."""
    return v.view([1, x.shape[1]] + [1] * (x.dim() - 2))


_HAS_FUSED_KERNELS = hasattr(torch, "batch_norm_backward_elemt")


def _fused(x):
    return _HAS_FUSED_KERNELS and x.is_cuda


def _memory_format(x):
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


_ones = {}


def _one(dtype, device):
    """A cached 1-element tensor holding 1 (the count slot of the statistics, scaled with them)."""
    key = (dtype, device)
    one = _ones.get(key)
    if one is None:
        one = _ones[key] = torch.ones(1, dtype=dtype, device=device)
    return one


def _local_sums(x, eps, acc):
    """This rank's (n * mean, n * E[x^2], n) per channel, as one (2C + 1) tensor in `acc`: sums
    over ranks give the whole batch's moments, whatever each rank's batch size."""
    c = x.shape[1]
    n_local = x.numel() // c if c else 0
    if n_local == 0:
        return torch.zeros(2 * c + 1, dtype=acc, device=x.device)
    if _fused(x):
        mean, invstd = torch.batch_norm_stats(x, eps)
        mean = mean.to(acc)
        ex2 = invstd.to(acc).pow(-2).sub_(eps).addcmul_(mean, mean)
    else:  # Welford in one pass over the activation
        var, mean = torch.var_mean(x.to(acc), dim=_batch_dims(x), correction=0)
        ex2 = var.addcmul_(mean, mean)
    return torch.cat([mean, ex2, _one(acc, x.device)]).mul_(n_local)


def _global_moments(stats, c, eps):
    """(mean, biased variance, invstd) of the whole batch from the summed statistics."""
    moments = stats[:2 * c] / stats[2 * c:]
    mean = moments[:c]
    var = torch.addcmul(moments[c:], mean, mean, value=-1).clamp_(min=0)
    return mean, var, (var + eps).rsqrt_()


def _update_running(x, stats, mean, var, invstd, running_mean, running_var, momentum, eps):
    """Running statistics (unbiased variance) from the whole batch; returns (mean, invstd)."""
    c = mean.shape[0]
    n = stats[2 * c:]
    if _fused(x):
        # One kernel: the statistics of a one-row "gather", with the running update.
        counts = n if n.dtype == running_mean.dtype else n.to(running_mean.dtype)
        return torch.batch_norm_gather_stats_with_counts(
            x, mean.view(1, c), invstd.view(1, c), running_mean, running_var, momentum, eps,
            counts)
    # Bessel's correction n / (n - 1), or 1 for a single value in all.
    unbiased = var * (n / (n - 1).clamp_(min=1))
    running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
    running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return mean, invstd


def _normalize(x, weight, bias, mean, invstd, eps, acc):
    if x.numel() == 0:
        return torch.empty_like(x)
    if _fused(x):
        return torch.batch_norm_elemt(x, weight, bias, mean, invstd, eps)
    scale = invstd if weight is None else invstd * weight.to(acc)
    # (x - mean) first: folding the mean into the shift would cancel when it dwarfs the spread.
    y = x.to(acc) - _per_channel(mean, x)
    if bias is None:
        return y.mul_(_per_channel(scale, x)).to(x.dtype)
    return torch.addcmul(_per_channel(bias.to(acc), x), y, _per_channel(scale, x)).to(x.dtype)


def _backward_fused(ctx, dy, x, weight, mean, invstd):
    """CUDA: torch's fused kernels, which also give the weight and bias gradients (this rank's
    sums, taken before the in-place reduction, which the stream orders after them)."""
    c = x.shape[1]
    affine = weight is not None
    if x.numel() > 0:
        sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(
            dy, x, mean, invstd, weight, True, affine, affine)
        sums = torch.cat([sum_dy, sum_dy_xmu])
    else:
        sums = torch.zeros(2 * c, dtype=mean.dtype, device=x.device)
        gw = gb = torch.zeros_like(weight) if affine else None
    _allreduce_sum_on_stream_(sums, ctx.name + ".grad", ctx.process_set)
    if x.numel() == 0:
        return torch.zeros_like(x), gw, gb
    if affine and weight.dtype != mean.dtype:
        weight = weight.to(mean.dtype)
    count = ctx.total.to(torch.int32)
    gx = torch.batch_norm_backward_elemt(dy, x, mean, invstd, weight, sums[:c], sums[c:], count)
    return gx, gw, gb


def _backward_plain(ctx, dy, x, weight, mean, invstd):
    acc = mean.dtype
    c = x.shape[1]
    if x.numel() > 0:
        dims = _batch_dims(x)
        dya = dy.to(acc)
        xmu = x.to(acc) - _per_channel(mean, x)
        local = torch.cat([dya.sum(dims), (dya * xmu).sum(dims)])
    else:
        local = torch.zeros(2 * c, dtype=acc, device=x.device)
    # The weight and bias gradients are this rank's sums: taken before they are reduced.
    gw = gb = None
    if weight is not None:
        gw = (local[c:] * invstd).to(weight.dtype)
        gb = local[:c].to(weight.dtype, copy=True)
    sums = _allreduce_sum_(local, ctx.name + ".grad", ctx.process_set)
    if x.numel() == 0:
        return torch.zeros_like(x), gw, gb
    mean_dy = sums[:c] / ctx.total
    mean_dy_xmu = sums[c:] / ctx.total
    scale = invstd if weight is None else invstd * weight.to(acc)
    # gx = scale * (dy - mean_dy - xmu * invstd^2 * mean_dy_xmu), factors folded first.
    xmu.mul_(_per_channel(-scale * invstd * invstd * mean_dy_xmu, x))
    xmu.add_(_per_channel(-scale * mean_dy, x))
    gx = torch.addcmul(xmu, dya, _per_channel(scale, x)).to(x.dtype)
    return gx, gw, gb


class _SyncBatchNormFunction(torch.autograd.Function):
    """One allreduce of the statistics per forward and one per backward. On CUDA neither
    synchronizes the host with the device: the collectives are ordered on the stream."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set,
                name):
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        x = x.contiguous(memory_format=_memory_format(x))
        c = x.shape[1]
        stats = _local_sums(x, eps, acc)
        if x.is_cuda:
            _allreduce_sum_on_stream_(stats, name + ".stats", process_set)
        else:
            _allreduce_sum_(stats, name + ".stats", process_set)
        # The total count stays on the device: reading it on the host would synchronize with
        # the device on every forward. Only a rank whose own batch is empty must look (if every
        # rank's is, there are no statistics to normalize with).
        if x.numel() == 0 and stats[2 * c].item() == 0:
            raise ValueError("SyncBatchNorm '%s': every rank has an empty batch" % name)
        mean, var, invstd = _global_moments(stats, c, eps)
        if running_mean is not None:
            mean, invstd = _update_running(x, stats, mean, var, invstd, running_mean,
                                           running_var, momentum, eps)
        y = _normalize(x, weight, bias, mean, invstd, eps, acc)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total = stats[2 * c:]
        ctx.process_set = process_set
        ctx.name = name
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, mean, invstd = ctx.saved_tensors
        dy = grad_y.contiguous(memory_format=_memory_format(x))
        backward = _backward_fused if _fused(x) else _backward_plain
        gx, gw, gb = backward(ctx, dy, x, weight, mean, invstd)
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
