"""Asynchronous collectives of horovod.torch (same names, defaults and semantics), plus poll,
synchronize, barrier and join. Each *_async returns an integer handle; synchronize(handle)
waits (GIL released) and returns the result."""

import torch

from perseus.common import basics as _basics
from perseus.common.exceptions import InvalidArgumentError, UnsupportedError
from perseus.common.names import blocking_name, op_name
from perseus.common.ops import (Average, Max, Min, Product, Sum, check_adasum, resolve_op,
                                to_core_op)
from perseus.common.process_sets import global_process_set, process_set_id, set_root
from perseus.torch import _tensors as _t


def _core():
    return _basics.core()


def _wait_device(pending):
    """CUDA: make the current stream wait for the collective instead of the host."""
    t = pending.device_tensor
    if t is not None and t.is_cuda:
        try:
            pending.core.cuda_stream_wait(_t.current_stream_ptr(t.device))
        except UnsupportedError:
            pass  # the engine completed on the host already


def poll(handle):
    """True when the operation behind `handle` has completed."""
    return _t.lookup(handle).core.poll()


def synchronize(handle):
    """Waits for `handle` and returns its output. Raises the op's error (a
    PerseusInternalError / HorovodInternalError for runtime failures)."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle()
    pending = _t.take(handle)
    pending.core.wait()
    _wait_device(pending)
    return pending.finish(pending.core)


# --- allreduce -------------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                     kind="allreduce"):
    ps = process_set_id(process_set)
    name = op_name(kind, name, ps)
    _t.check_reducible(tensor, kind, name)
    core_op = to_core_op(op)
    check_adasum(op, ps)
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    stream = _t.stream_of(src)
    if output is None:  # in place
        h = _core().allreduce(name, _t.capsule(src), None, core_op, float(prescale_factor),
                              float(postscale_factor), ps, stream)
        finish = (lambda _h: tensor) if src is tensor else (lambda _h: tensor.copy_(src))
    else:
        h = _core().allreduce(name, _t.capsule(src), _t.capsule(output), core_op,
                              float(prescale_factor), float(postscale_factor), ps, stream)
        finish = lambda _h: output  # noqa: E731
    return _t.register(h, finish, tensor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the set into a new tensor (op=None means Average)."""
    op = resolve_op(op, average)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce."""
    op = resolve_op(op, average)
    return _allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor,
                            process_set)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    ps = process_set_id(process_set)
    name = op_name("grouped_allreduce", name, ps)
    for i, t in enumerate(tensors):
        _t.check_reducible(t, "grouped_allreduce", "%s[%d]" % (name, i))
    core_op = to_core_op(op)
    check_adasum(op, ps)
    srcs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    stream = _t.stream_of(srcs[0]) if srcs else 0
    if outputs is None:
        h = _core().grouped_allreduce(name, [_t.capsule(s) for s in srcs], None, core_op,
                                      float(prescale_factor), float(postscale_factor), ps,
                                      stream)

        def finish(_h):
            for t, s in zip(tensors, srcs):
                if s is not t:
                    t.copy_(s)
            return list(tensors)
    else:
        h = _core().grouped_allreduce(name, [_t.capsule(s) for s in srcs],
                                      [_t.capsule(o) for o in outputs], core_op,
                                      float(prescale_factor), float(postscale_factor), ps,
                                      stream)
        finish = lambda _h: list(outputs)  # noqa: E731
    return _t.register(h, finish, srcs[0] if srcs else None)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = resolve_op(op, average)
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = resolve_op(op, average)
    return _grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                    process_set)


# --- sparse ----------------------------------------------------------------------------------

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: every rank's indices and values are allgathered, so the
    result holds every rank's entries (duplicates summed when coalesced); op=Average divides
    the values by the set size. Returns a callable that waits and returns the sparse tensor
    (DistributedOptimizer calls it; synchronize() takes it too)."""
    t = tensor
    if not (isinstance(t, torch.Tensor) and t.is_sparse):
        raise InvalidArgumentError("sparse_allreduce_async '%s': expected a sparse COO tensor"
                                   % (name,))
    if op not in (Average, Sum):
        raise UnsupportedError("sparse_allreduce_async '%s': op must be Average or Sum" % (name,))
    # allgather concatenates along dim 0: indices travel transposed, one row per entry.
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(),
                                     name="%s.indices" % name, process_set=process_set)
    values_handle = allgather_async(t._values(), name="%s.values" % name,
                                    process_set=process_set)
    set_size = (_basics.size() if process_set_id(process_set) == 0
                else _core().process_set_info(process_set_id(process_set))[1])

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / set_size
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())
    return handle


# --- allgather / broadcast / alltoall ---------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dim 0 (ranks may differ in dim 0 only)."""
    ps = process_set_id(process_set)
    name = op_name("allgather", name, ps)
    wire, restore = _t.to_wire(tensor, "allgather", name)
    h = _core().allgather(name, _t.capsule(wire), ps, _t.stream_of(wire))
    return _t.register(h, lambda ch: restore(_t.library_output(ch, 0)), wire)


def allgather_blocking(tensor, name=None, process_set=global_process_set):
    """synchronize(allgather_async(...)) without the handle table. A contiguous CPU tensor of
    a native dtype takes one FASTCALL (_core.allgather_tensor for a torch.Tensor of up to
    _ALLGATHER_POSTED_MAX bytes, read as allreduce_ reads it, else _core.allgather_into): no
    capsule, no Python handle, the result written or copied into a new tensor, which costs
    less than wrapping the library's memory where the extension takes the call."""
    ps = 0 if process_set is global_process_set else process_set_id(process_set)
    if type(name) is not str:
        name = blocking_name("allgather", ps) if name is None else str(name)
    out = (_core_module or _direct()).allgather_tensor(tensor, name, ps, _ALLGATHER_POSTED_MAX,
                                                       _empty_like_with_address)
    if out is not NotImplemented:
        return out
    return allgather_declined(tensor, name, ps)


def allgather_declined(tensor, name, ps):
    """allgather_blocking of a tensor that _core.allgather_tensor declined, with its name."""
    code = None
    if (isinstance(tensor, _Tensor) and tensor.is_cpu and tensor.layout is _strided
            and tensor.is_contiguous()):
        code = _CORE_DTYPE.get(tensor.dtype)
        if code is not None and tensor.nbytes <= _ALLGATHER_COPY_MAX:
            return (_core_module or _direct()).allgather_into(
                name, tensor.data_ptr(), code, tensor.shape, ps, _empty_with_address,
                tensor.dtype)
    if code is None:
        wire, restore = _t.to_wire(tensor, "allgather", name)
    else:
        wire, restore = tensor, None
    h = _direct().allgather(name, _t.capsule(wire), ps, _t.stream_of(wire))
    h.wait()
    if wire.is_cuda:
        _wait_device(_t.Pending(h, None, wire))
    out = _t.library_output(h, 0)
    return out if restore is None else restore(out)


# Up to this many bytes of input (the post lane's bound for allgathers through the pool),
# allgather_into makes the result tensor and has the collective's result copied into it
# (bench/small_ops/README.md); above, the result is the library's memory, shared zero-copy.
# The extension's allgather_tensor copies up to the same bound (kCopyOutputMaxBytes).
_ALLGATHER_COPY_MAX = 64 * 1024
# Up to this many bytes of input (PERSEUS_POSTED_BY_ADDRESS's default: Note [Posts by address]),
# _core.allgather_tensor opens a posted allgather and has it written straight into the result
# tensor, which it makes while the peers post; above 64 KiB only a post by address goes that way,
# and the rest is declined to the handle path.
_ALLGATHER_POSTED_MAX = 4 * 1024 * 1024
# Up to this many bytes, hvd.allreduce reduces a copy of its input in place (autograd_ops): a
# bound on the copy, whose cost grows with the size where the asynchronous path's does not.
_ALLREDUCE_COPY_MAX = 16 * 1024


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    ps = process_set_id(process_set)
    name = op_name("grouped_allgather", name, ps)
    wires = [_t.to_wire(t, "grouped_allgather", "%s[%d]" % (name, i))
             for i, t in enumerate(tensors)]
    h = _core().grouped_allgather(name, [_t.capsule(w) for w, _ in wires], ps,
                                  _t.stream_of(wires[0][0]) if wires else 0)

    def finish(ch):
        return [restore(_t.library_output(ch, i)) for i, (_, restore) in enumerate(wires)]
    return _t.register(h, finish, wires[0][0] if wires else None)


def _broadcast_async(tensor, output, root_rank, name, process_set):
    ps = process_set_id(process_set)
    name = op_name("broadcast", name, ps)
    root = set_root(ps, root_rank)
    wire, restore = _t.to_wire(tensor, "broadcast", name)
    stream = _t.stream_of(wire)
    if output is None:
        h = _core().broadcast(name, _t.capsule(wire), None, root, ps, stream)

        def finish(_h):
            result = restore(wire)
            if result.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
                tensor.data.copy_(result)
            return tensor
    else:
        out_wire, _ = _t.to_wire(output, "broadcast", name)
        h = _core().broadcast(name, _t.capsule(wire), _t.capsule(out_wire), root, ps,
                              stream)
        finish = lambda _h: restore(out_wire)  # noqa: E731
    return _t.register(h, finish, wire)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor, in a new tensor on every rank."""
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast."""
    return _broadcast_async(tensor, None, root_rank, name, process_set)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows (dim 0) to set rank i (even split when None). synchronize returns
    (output, received_splits); received_splits (int32) is on the device of `splits` when that
    is a tensor, as Horovod's (splits.new()), else on the CPU."""
    ps = process_set_id(process_set)
    name = op_name("alltoall", name, ps)
    wire, restore = _t.to_wire(tensor, "alltoall", name)
    splits_device = splits.device if torch.is_tensor(splits) else torch.device("cpu")
    if splits is not None:
        splits = [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
    h = _core().alltoall(name, _t.capsule(wire), splits, ps, _t.stream_of(wire))

    def finish(ch):
        received = torch.tensor(ch.received_splits(), dtype=torch.int32, device=splits_device)
        return restore(_t.library_output(ch, 0)), received
    return _t.register(h, finish, wire)


# --- blocking in-place forms (allreduce_, broadcast_) -----------------------------------------
# A named call on a torch.Tensor of the global set goes to the core as the tensor itself
# (_core.allreduce_tensor): the extension reads its address, dtype and shape in one C call
# through torch's DLPack exchange API, where reading them here costs six attribute lookups, half
# of a small collective. It returns NotImplemented for what it cannot view (another device, a
# view that is not contiguous, a subclass, another dtype), which then goes by address as below.
# A contiguous CPU or CUDA tensor goes to the core by address (_core.allreduce_inplace): no
# capsule, no handle, one FASTCALL; a CUDA call returns once its GPU work is done, as
# synchronize() does. Anything else takes the asynchronous path, which converts it or reports
# the error. The core checks names, dtypes and shapes across ranks on every path.

# perseus_reduce_op of the ops the direct call takes (op=None with average=None: Average).
_DIRECT_OPS = {None: 1, Average: 1, Sum: 0, Min: 2, Max: 3, Product: 4}
_core_module = None


def _blocking_name(kind, process_set, op=None, average=None):
    """blocking_name of `kind` on `process_set` with the op that `op` and Horovod's deprecated
    `average` make (an unnamed blocking call's name)."""
    if op is None and average is not None:
        op = Average if average else Sum
    return blocking_name(kind, 0 if process_set is global_process_set
                         else process_set_id(process_set), op)


def _direct():
    global _core_module
    if _core_module is None:
        core = _core()
        api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        if api is not None:
            try:
                core.register_tensor_type(torch.Tensor, api)
            except ValueError:  # an exchange API this extension does not read: by address
                pass
        _core_module = core
    return _core_module


# The checks of dense_cpu_code, inlined in the blocking calls with these names bound here: a
# call and three module lookups are a tenth of a small collective's Python part.
_Tensor = torch.Tensor
_strided = torch.strided
_CORE_DTYPE = _t.CORE_DTYPE
_empty_with_address = _t.empty_with_address
_empty_like_with_address = _t.empty_like_with_address


def fast_entry(kind, fallback, config, module=None):
    """The extension's C function for the blocking call `kind` ('allreduce', 'allreduce_',
    'broadcast_' or 'allgather'), standing for the Python function `fallback`: it binds the arguments as
    `fallback` would, takes the fast call where `fallback` would, and calls `fallback` with the
    arguments unchanged otherwise. A user's call so costs no Python frame (bench/small_ops/
    README.md). `module`: the name of the module that holds it as `kind` (where pickle finds
    it; default fallback's). `fallback` itself where the extension has no such entry."""
    make = getattr(_direct(), "fast_entry", None)
    if make is None:
        return fallback
    base = kind.rstrip("_")
    unnamed = blocking_name(base)
    if base == "allreduce":  # by the op's core code, as the entry reads it (_DIRECT_OPS)
        unnamed = {code: blocking_name(base, 0, op) for op, code in _DIRECT_OPS.items()}
    return make(kind, fallback, global_process_set, config, module or fallback.__module__,
                unnamed)


def allreduce_blocking_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    """synchronize(allreduce_async_(...)) as one call with no handle (the core's allreduce
    entry with its blocking flag). Unnamed, it is blocking_name('allreduce')."""
    if name is None:
        name = _blocking_name("allreduce", process_set, op, average)
    if average is None and type(name) is str and process_set is global_process_set:
        try:
            core_op = _DIRECT_OPS.get(op)
        except TypeError:  # an unhashable op: the asynchronous path reports it
            core_op = None
        if core_op is not None and (_core_module or _direct()).allreduce_tensor(
                tensor, name, core_op, prescale_factor, postscale_factor, 0) is not NotImplemented:
            return tensor
    if (average is None and isinstance(tensor, _Tensor) and tensor.is_cpu
            and tensor.layout is _strided and tensor.is_contiguous()):
        try:
            core_op = _DIRECT_OPS.get(op)
        except TypeError:  # an unhashable op: the asynchronous path reports it
            core_op = None
        code = _CORE_DTYPE.get(tensor.dtype)
        if core_op is not None and code is not None:
            ps = 0 if process_set is global_process_set else process_set_id(process_set)
            if type(name) is not str:
                name = op_name("allreduce", name, ps)
            (_core_module or _direct()).allreduce_inplace(
                name, tensor.data_ptr(), code, tensor.shape, core_op, prescale_factor,
                postscale_factor, ps)
            return tensor
    return _allreduce_blocking_device_(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set)


def _allreduce_blocking_device_(tensor, average, name, op, prescale_factor, postscale_factor,
                                process_set):
    """allreduce_blocking_ of anything but a dense CPU tensor: a dense CUDA tensor by address,
    the rest through the asynchronous path."""
    try:
        core_op = _DIRECT_OPS.get(op) if average is None else None
    except TypeError:
        core_op = None
    cuda = None if core_op is None else _t.dense_cuda_args(tensor)
    if cuda is None:
        return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                            postscale_factor, process_set))
    ps = 0 if process_set is global_process_set else process_set_id(process_set)
    if type(name) is not str:
        name = op_name("allreduce", name, ps)
    _direct().allreduce_inplace(name, tensor.data_ptr(), cuda[0], tensor.shape, core_op,
                                prescale_factor, postscale_factor, ps, cuda[1], cuda[2])
    return tensor


def broadcast_blocking_(tensor, root_rank, name=None, process_set=global_process_set):
    """synchronize(broadcast_async_(...)) as one call with no handle. Unnamed, it is
    blocking_name('broadcast')."""
    if name is None:
        name = _blocking_name("broadcast", process_set)
    if (type(name) is str and process_set is global_process_set and type(root_rank) is int
            and (_core_module or _direct()).broadcast_tensor(tensor, name, root_rank, 0)
            is not NotImplemented):
        return tensor
    if (isinstance(tensor, _Tensor) and tensor.is_cpu and tensor.layout is _strided
            and tensor.is_contiguous()):
        code = _CORE_DTYPE.get(tensor.dtype)
        if code is not None:
            ps = 0 if process_set is global_process_set else process_set_id(process_set)
            if type(name) is not str:
                name = op_name("broadcast", name, ps)
            root = root_rank if ps == 0 and type(root_rank) is int else set_root(ps, root_rank)
            (_core_module or _direct()).broadcast_inplace(name, tensor.data_ptr(), code,
                                                          tensor.shape, root, ps)
            return tensor
    cuda = _t.dense_cuda_args(tensor)
    if cuda is None:
        return synchronize(broadcast_async_(tensor, root_rank, name, process_set))
    ps = 0 if process_set is global_process_set else process_set_id(process_set)
    if type(name) is not str:
        name = op_name("broadcast", name, ps)
    root = root_rank if ps == 0 and type(root_rank) is int else set_root(ps, root_rank)
    _direct().broadcast_inplace(name, tensor.data_ptr(), cuda[0], tensor.shape, root, ps,
                                cuda[1], cuda[2])
    return tensor


# --- reducescatter -------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces, then gives set rank i the i-th block of dim 0 (the first dim0 % size ranks
    get one row more)."""
    ps = process_set_id(process_set)
    name = op_name("reducescatter", name, ps)
    _t.check_reducible(tensor, "reducescatter", name)
    src = tensor.detach().contiguous()
    h = _core().reducescatter(name, _t.capsule(src), to_core_op(op), float(prescale_factor),
                              float(postscale_factor), ps, _t.stream_of(src))
    return _t.register(h, lambda ch: _t.library_output(ch, 0), src)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    ps = process_set_id(process_set)
    name = op_name("grouped_reducescatter", name, ps)
    for i, t in enumerate(tensors):
        _t.check_reducible(t, "grouped_reducescatter", "%s[%d]" % (name, i))
    srcs = [t.detach().contiguous() for t in tensors]
    h = _core().grouped_reducescatter(name, [_t.capsule(s) for s in srcs], to_core_op(op),
                                      float(prescale_factor), float(postscale_factor), ps,
                                      _t.stream_of(srcs[0]) if srcs else 0)
    return _t.register(h, lambda ch: [_t.library_output(ch, i) for i in range(len(srcs))],
                       srcs[0] if srcs else None)


# --- barrier / join -------------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Blocks until every rank of the set reached the barrier."""
    _core().barrier(process_set_id(process_set)).wait()


def join(device=-1):
    """This rank has no more work: it contributes zeros to the collectives that other ranks
    still run until every rank joined. Returns the last rank that joined.

    device: the CUDA device for the zeros of CUDA collectives after this rank joined; -1: the
    device this process already used, else ``local_rank() % torch.cuda.device_count()``."""
    h = _core().join(int(device))
    h.wait()
    return h.join_rank()
