"""TorchState (Horovod 0.28's horovod.torch.elastic.state): models, optimizers, LR schedulers
and ElasticSamplers, each kept by a handler, plus plain objects as in ObjectState.

Contract: training thread only; sync() is collective and broadcasts from the source that the
run loop agreed on (State.sync_root).
"""

import copy

import torch

from perseus.common.elastic.state import ObjectState
from perseus.torch.elastic.sampler import ElasticSampler
from perseus.torch.functions import (
    broadcast_object, broadcast_optimizer_state, broadcast_parameters)

_LRScheduler = getattr(torch.optim.lr_scheduler, "LRScheduler",
                       getattr(torch.optim.lr_scheduler, "_LRScheduler", None))


class TorchState(ObjectState):
    """State of a PyTorch training process. `model`, `optimizer` and any keyword argument
    become attributes; a Module, Optimizer, LR scheduler or ElasticSampler is kept by its
    handler (its state_dict is copied on save and loaded on restore), anything else as in
    ObjectState. Assigning a new model or optimizer to the attribute saves it."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = _get_handlers(kwargs)
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        # Optimizers first: broadcast_optimizer_state may take a zero-gradient step on a rank
        # whose optimizer has no state yet, and weight decay would then move the weights after
        # the model was broadcast.
        for handler in sorted(self._handlers.values(), key=lambda h: h.sync_order):
            handler.sync(self.sync_root)
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers and hasattr(self, name):
            handlers[name].set_value(value)
        super().__setattr__(name, value)


class StateHandler:
    """Keeps one object's committed state: save() copies it, restore() loads the copy,
    sync(root) makes every rank's equal to root's, reset() follows a membership change."""
    sync_order = 1

    def __init__(self, value):
        self.value = value
        self._saved = copy.deepcopy(value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root,
                                                    name="elastic." + type(self).__name__))

    def reset(self):
        pass

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    sync_order = 2

    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class OptimizerStateHandler(StateHandler):
    sync_order = 0

    def restore(self):
        self._forget_pending()
        super().restore()

    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)

    def reset(self):
        self._forget_pending()

    def _forget_pending(self):
        # A DistributedOptimizer's allreduces of the failed membership never complete; left
        # in place, the next zero_grad() or step() would refuse or wait on them.
        forget = getattr(self.value, "_forget_pending", None)
        if forget is not None:
            forget()


class LRSchedulerStateHandler(StateHandler):
    pass


class SamplerStateHandler(StateHandler):
    def reset(self):
        self.value.reset()  # split what is left of the epoch over the new size()


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
] + ([(_LRScheduler, LRSchedulerStateHandler)] if _LRScheduler is not None else [])


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


def _get_handlers(kwargs):
    handlers, plain = {}, {}
    for name, value in kwargs.items():
        handler = _get_handler(value)
        if handler is not None:
            handlers[name] = handler
        else:
            plain[name] = value
    return handlers, plain
