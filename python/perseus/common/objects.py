"""broadcast_object / allgather_object: pickled bytes over the collectives, as numpy arrays,
so every framework layer shares them."""

import io
import pickle

import numpy as np

from perseus.common import basics
from perseus.common.process_sets import global_process_set, process_set_id, set_root

try:
    import cloudpickle as _pickler  # Horovod uses cloudpickle: lambdas and local classes work
except ImportError:  # pragma: no cover
    _pickler = pickle


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def _loads(array):
    return pickle.loads(array.tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank of the set."""
    c = basics.core()
    ps = process_set_id(process_set)
    name = name or type(obj).__name__
    is_root = basics.rank() == root_rank  # root_rank is a rank of the whole job, as in Horovod
    root = set_root(ps, root_rank)
    payload = _dumps(obj) if is_root else None
    size = np.array([0 if payload is None else payload.size], dtype=np.int64)
    c.broadcast(name + ".sz", size, None, root, ps).wait()
    if payload is None:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    else:
        payload = payload.copy()  # frombuffer arrays are read-only; broadcast writes in place
    c.broadcast(name + ".t", payload, None, root, ps).wait()
    return obj if is_root else _loads(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every set rank's `obj`, in rank order."""
    c = basics.core()
    ps = process_set_id(process_set)
    name = name or type(obj).__name__
    payload = _dumps(obj)
    h = c.allgather(name + ".sz", np.array([payload.size], dtype=np.int64), ps)
    h.wait()
    sizes = h.output(0).copy()
    h = c.allgather(name + ".t", payload, ps)
    h.wait()
    data = h.output(0)
    result, offset = [], 0
    for n in sizes:
        result.append(_loads(data[offset:offset + int(n)]))
        offset += int(n)
    return result
