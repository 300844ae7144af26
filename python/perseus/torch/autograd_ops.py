"""Synchronous collectives of horovod.torch. The out-of-place ones are autograd functions
whose gradients are the ones Horovod defines:
  allreduce      -> allreduce of the gradient with the same op and factors
  allgather      -> the average of the gradients over ranks, sliced to this rank's rows
  broadcast      -> the averaged gradient on the root, zeros elsewhere
  alltoall       -> alltoall of the gradient back with the received splits
  reducescatter  -> allgather of the gradient (times the set size for Sum)
An unnamed call takes its kind's blocking name (perseus.common.names), forward and backward.
"""

import torch

from perseus.common.ops import Average, Sum, resolve_op
from perseus.common.process_sets import global_process_set
from perseus.torch import mpi_ops as _ops
from perseus.torch.compression import Compression


def _set_size(process_set):
    from perseus.common import basics
    return basics.size() if process_set.process_set_id == 0 else process_set.size()


def _set_rank(process_set):
    from perseus.common import basics
    return basics.rank() if process_set.process_set_id == 0 else process_set.rank()


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return _ops.synchronize(_ops.allreduce_async(
            tensor, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, ps = ctx.args
        return (allreduce(grad_output, op=op, prescale_factor=pre, postscale_factor=post,
                          process_set=ps), None, None, None, None, None)


def _allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
               prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the set (op=None: Average) and returns a new tensor."""
    if name is None:
        # With its name, a call that the C entry can take goes there.
        name = _ops._blocking_name("allreduce", process_set, op, average)
        return allreduce(tensor, average, name, compression, op, prescale_factor,
                         postscale_factor, process_set)
    op = resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(reduced, cctx)


# A named allreduce of a small CPU tensor that does not require grad, of the global set and
# with no compression, is a copy reduced in place in one extension call (_core.allreduce_copy):
# the autograd function and the asynchronous path cost several times the collective. The
# function above takes every other call.
allreduce = _ops.fast_entry(
    "allreduce", _allreduce, (_ops._DIRECT_OPS, Compression.none, _ops._ALLREDUCE_COPY_MAX),
    __name__)


# The in-place forms are the blocking calls themselves, as C functions (mpi_ops.fast_entry): a
# Python frame was a fifth of a small allreduce_.
allreduce_ = _ops.fast_entry("allreduce_", _ops.allreduce_blocking_, _ops._DIRECT_OPS, __name__)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(_ops.synchronize(_ops.grouped_allreduce_async(
            list(tensors), name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        reduced = grouped_allreduce(list(grads), op=op, prescale_factor=pre,
                                    postscale_factor=post, process_set=ps)
        return (None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    op = resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[c for c, _ in pairs])
    return [compression.decompress(r, cctx) for r, (_, cctx) in zip(reduced, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return _ops.synchronize(_ops.grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor, process_set))


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return _ops.synchronize(_ops.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad_reduced = allreduce(grad_output, op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ps)
        offset = int(dims[:_set_rank(ps)].sum().item())
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


_core_allgather = None  # _core.allgather_tensor, bound on the first call


def _bind_core_allgather():
    global _core_allgather
    _core_allgather = _ops._direct().allgather_tensor
    return _core_allgather


def _allgather(tensor, name=None, process_set=global_process_set):
    # A named call of the global set goes to the extension first, from this frame: it takes a
    # small dense CPU tensor that does not require grad and declines (NotImplemented) the rest.
    # A second Python frame and the autograd checks were a tenth of a small allgather.
    if name is None:
        name = _ops._blocking_name("allgather", process_set)
    tried = type(name) is str and process_set is global_process_set
    if tried:
        out = (_core_allgather or _bind_core_allgather())(
            tensor, name, 0, _ops._ALLGATHER_POSTED_MAX, _ops._empty_like_with_address)
        if out is not NotImplemented:
            return out
    # The autograd function costs several times a small allgather: only for a gradient.
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _Allgather.apply(tensor, name, process_set)
    if tried:
        return _ops.allgather_declined(tensor, name, 0)
    return _ops.allgather_blocking(tensor, name, process_set)


# A named small allgather of the global set goes to the extension with no Python frame; the
# function above takes every other call.
allgather = _ops.fast_entry("allgather", _allgather,
                            (_ops._ALLGATHER_POSTED_MAX, _ops._empty_like_with_address))


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(_ops.synchronize(_ops.grouped_allgather_async(list(tensors), name,
                                                                    process_set)))

    @staticmethod
    def backward(ctx, *grads):
        # Each tensor's gradient as allgather's: the average over ranks, this rank's rows.
        ps = ctx.process_set
        reduced = grouped_allreduce([g.contiguous() for g in grads], op=Average, process_set=ps)
        dims = allgather(torch.tensor(ctx.dims, dtype=torch.int64).view(1, -1), process_set=ps)
        offsets = dims[:_set_rank(ps)].sum(dim=0)
        return (None, None) + tuple(g.narrow(0, int(offsets[i]), ctx.dims[i])
                                    for i, g in enumerate(reduced))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _ops.synchronize(_ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        from perseus.common import basics
        if basics.rank() != ctx.root_rank:  # root_rank is a rank of the whole job
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    if name is None:
        name = _ops._blocking_name("broadcast", process_set)
    return _Broadcast.apply(tensor, root_rank, name, process_set)


broadcast_ = _ops.fast_entry("broadcast_", _ops.broadcast_blocking_, None, __name__)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = _ops.synchronize(
            _ops.alltoall_async(tensor, splits=splits, name=name, process_set=process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:  # Horovod returns the tensor alone when no splits were given
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *_grad_splits):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns the output, or (output, received_splits) when `splits` is given (Horovod)."""
    if name is None:
        name = _ops._blocking_name("alltoall", process_set)
    return _Alltoall.apply(tensor, splits, name, process_set)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        return _ops.synchronize(_ops.reducescatter_async(
            tensor, name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(grad_output.contiguous(), process_set=ctx.process_set)
        if ctx.op == Sum:
            grad = grad * _set_size(ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    if name is None:
        name = _ops._blocking_name("reducescatter", process_set, op)
    compressed, cctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                               postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                       *[c for c, _ in pairs])
    return [compression.decompress(o, cctx) for o, (_, cctx) in zip(outs, pairs)]


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        return tuple(_ops.synchronize(_ops.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        # Each tensor's gradient as reducescatter's: the allgather of the gradient blocks.
        gathered = grouped_allgather([g.contiguous() for g in grads], process_set=ctx.process_set)
        if ctx.op == Sum:
            gathered = [g * _set_size(ctx.process_set) for g in gathered]
        return (None, None, None, None, None) + tuple(gathered)
