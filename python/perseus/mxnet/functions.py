"""broadcast_parameters, broadcast_object and allgather_object (Horovod's horovod.mxnet)."""
import types

import mxnet as mx
from perseus.common import objects as _objects

from . import _basics
from .mpi_ops import broadcast_


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Broadcasts `params` (a dict of name -> NDArray, or a gluon ParameterDict / dict of
    Parameters) from `root_rank`, in sorted name order. Parameters whose initialisation is
    deferred are broadcast as soon as they are initialised (their first forward)."""
    if _basics.size() == 1:
        return
    prefix = "" if prefix is None else str(prefix)
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, mx.gluon.parameter.ParameterDict):
        items = sorted(params.items())
    else:
        raise ValueError("broadcast_parameters expects a dict or a ParameterDict, got %s"
                         % type(params).__name__)
    tensors, names = [], []
    for name, p in items:
        if isinstance(p, mx.gluon.parameter.Parameter):
            try:
                arrays = p.list_data()
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(p, root_rank, prefix + str(name))
                continue
            for i, arr in enumerate(arrays):
                tensors.append(arr)
                names.append(prefix + str(name) + ("" if i == 0 else ".%d" % i))
        elif isinstance(p, mx.nd.NDArray):
            tensors.append(p)
            names.append(prefix + str(name))
        else:
            raise ValueError("broadcast_parameters: %r is a %s, not an NDArray or Parameter"
                             % (name, type(p).__name__))
    for t, n in zip(tensors, names):
        broadcast_(t, root_rank, name="parameter." + n)
    for t in tensors:  # every parameter is identical when this returns (as in Horovod)
        t.wait_to_read()


def _broadcast_after_init(param, root_rank, name):
    original = param._init_impl

    def init_then_broadcast(self, *args, **kwargs):
        original(*args, **kwargs)
        for i, arr in enumerate(self.list_data()):
            broadcast_(arr, root_rank, name="parameter." + name + ("" if i == 0 else ".%d" % i))
            arr.wait_to_read()
        self._init_impl = original

    param._init_impl = types.MethodType(init_then_broadcast, param)


def broadcast_object(obj, root_rank=0, name=None, process_set=_basics.global_process_set):
    """`obj` of `root_rank` (any picklable object), on every rank."""
    return _objects.broadcast_object(obj, root_rank=root_rank, name=name,
                                     process_set=process_set)


def allgather_object(obj, name=None, process_set=_basics.global_process_set):
    """The list of every rank's `obj`, in rank order."""
    return _objects.allgather_object(obj, name=name, process_set=process_set)
