"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object."""

import torch

from perseus.common import objects as _objects
from perseus.common.process_sets import global_process_set
from perseus.torch import mpi_ops as _ops


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts in place a model's state_dict(), named_parameters() or a list of tensors
    (or (name, tensor) pairs) from root_rank."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        params = list(params)  # a generator such as model.named_parameters()
        if params and not isinstance(params[0], tuple):
            raise ValueError("invalid params of type: %s" % type(params[0]))
    handles = []
    for name, p in params:
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: %s is a %s, not a tensor"
                             % (name, type(p).__name__))
        handles.append(_ops.broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                             None if name is None else "bp." + name,
                                             process_set))
    for h in handles:
        _ops.synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (moments, step counts, learning rates...) equal to
    root_rank's. The state dict is pickled over one broadcast and loaded with
    load_state_dict, which moves tensors to each parameter's device."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _initialize_state(optimizer)
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             name="optimizer_state", process_set=process_set)
    optimizer.load_state_dict(state)


def _initialize_state(optimizer):
    """Horovod's state initialisation for a new optimizer: zero gradients for every trainable
    parameter (so the step changes no weight through a gradient), then one step of the wrapped optimizer, so that every rank has the state
    entries (momentum buffers...) that load_state_dict fills. A DistributedOptimizer steps its
    inner optimizer directly: its own step() would allreduce, and deadlock unless every rank
    called it."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    from perseus.torch.optimizer import _DistributedOptimizer
    if type(optimizer).__dict__.get("_make_hook") is _DistributedOptimizer.__dict__["_make_hook"]:
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's obj (any picklable object) on every rank."""
    return _objects.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's obj, in rank order."""
    return _objects.allgather_object(obj, name, process_set)
