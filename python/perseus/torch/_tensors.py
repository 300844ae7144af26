"""torch tensors <-> perseus._core: DLPack capsules, dtype checks, the handle table.

Tensors cross zero-copy as DLPack (torch.utils.dlpack). Non-contiguous tensors are made
contiguous first (a copy; in-place ops copy the result back). Library-owned outputs
(allgather, alltoall, reducescatter) come back as torch tensors that share the library's
memory and keep its handle alive."""

import itertools

import torch
from torch.utils import dlpack as _dlpack

from perseus.common.exceptions import InvalidArgumentError, UnsupportedError

# Dtypes the core communicates natively (perseus_dtype).
NATIVE = {torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool}

# perseus_dtype in include/perseus/c_api.h, for the blocking in-place calls (dense_cpu_code).
CORE_DTYPE = {torch.uint8: 0, torch.int8: 1, torch.int32: 2, torch.int64: 3, torch.float16: 4,
              torch.bfloat16: 5, torch.float32: 6, torch.float64: 7, torch.bool: 8}
_strided = torch.strided


def dense_cpu_code(tensor):
    """The perseus_dtype of a tensor the core can take by address: a contiguous, dense CPU
    torch tensor of a native dtype; None for anything else (which takes the DLPack path, where
    it is converted or its error reported)."""
    if (isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout is _strided
            and tensor.is_contiguous()):
        return CORE_DTYPE.get(tensor.dtype)
    return None


def dense_cuda_args(tensor):
    """(perseus_dtype, device index, current stream) of a contiguous, dense CUDA torch tensor
    of a native dtype, for the blocking calls; None for anything else."""
    if (isinstance(tensor, torch.Tensor) and tensor.is_cuda and tensor.layout is _strided
            and tensor.is_contiguous()):
        code = CORE_DTYPE.get(tensor.dtype)
        if code is not None:
            index = tensor.get_device()
            stream = (_raw_stream(index) if _raw_stream is not None
                      else torch.cuda.current_stream(index).cuda_stream)
            return code, index, stream
    return None


def empty_with_address(shape, dtype):
    """A new CPU tensor and its address, for results the core copies out (allgather_into).
    The sizes go as separate ints: torch parses them faster than a tuple (about 0.5 us)."""
    t = torch.empty(*shape, dtype=dtype) if shape else torch.empty(shape, dtype=dtype)
    return t, t.data_ptr()


def empty_like_with_address(shape, like):
    """empty_with_address with the dtype of tensor `like` (allgather_tensor)."""
    return empty_with_address(shape, like.dtype)


def check_reducible(tensor, op_kind, name):
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError("%s '%s': expected a torch.Tensor, got %s"
                                   % (op_kind, name, type(tensor).__name__))
    if tensor.dtype not in NATIVE:
        raise UnsupportedError(
            "%s '%s': dtype %s is not supported; use uint8, int8, int32, int64, float16, "
            "bfloat16, float32, float64 or bool" % (op_kind, name, tensor.dtype))
    if tensor.is_sparse:
        raise UnsupportedError("%s '%s': sparse tensors are not supported; use .to_dense()"
                               % (op_kind, name))


def to_wire(tensor, op_kind, name):
    """For data-movement ops (allgather, broadcast, alltoall): a contiguous tensor the core
    accepts, and a function restoring the original dtype on a result. Dtypes the core lacks
    (int16, complex...) travel as their bytes in an extra trailing dimension, which keeps the
    first-dimension semantics."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError("%s '%s': expected a torch.Tensor, got %s"
                                   % (op_kind, name, type(tensor).__name__))
    if tensor.is_sparse:
        raise UnsupportedError("%s '%s': sparse tensors are not supported" % (op_kind, name))
    src = tensor.detach().contiguous()
    if src.dtype in NATIVE:
        return src, lambda t: t
    dtype = src.dtype
    as_bytes = src.unsqueeze(-1).view(torch.uint8)
    return as_bytes, lambda t: t.view(dtype).squeeze(-1)


# torch's own exporter, without to_dlpack's Python wrapper and the detach() it needs there (the
# raw one exports a tensor that requires grad as it is): about a microsecond per collective.
_to_dlpack = getattr(torch._C, "_to_dlpack", None)


def capsule(tensor):
    if _to_dlpack is not None:
        return _to_dlpack(tensor)
    return _dlpack.to_dlpack(tensor.detach())


# torch's raw getter returns the same cudaStream_t as torch.cuda.current_stream(d).cuda_stream
# without building a Stream object (a few microseconds per call on the collective's path).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_ptr(device):
    """The current CUDA stream of `device` (a CUDA torch.device with an index) as an int."""
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def stream_of(tensor):
    """The current CUDA stream of the tensor's device (0 for CPU), for the core to order on."""
    if tensor.is_cuda:
        return current_stream_ptr(tensor.device)
    return 0


def library_output(core_handle, index):
    """Output `index` of a completed core handle as a torch tensor (zero-copy)."""
    return _dlpack.from_dlpack(core_handle.output(index, as_dlpack=True))


class Pending:
    """A submitted op: its core handle, and finish(), which builds the user-visible result
    once the handle completed. Holds the torch tensors the core reads or writes."""

    __slots__ = ("core", "finish", "device_tensor")

    def __init__(self, core_handle, finish, device_tensor):
        self.core = core_handle
        self.finish = finish
        self.device_tensor = device_tensor


# No lock: next() on itertools.count and single dict operations are atomic under the GIL,
# and these sit on every collective's path.
_pending = {}
_ids = itertools.count(1)


def register(core_handle, finish, tensor):
    """Stores a submitted op and returns the integer handle the user sees (Horovod style)."""
    handle = next(_ids)
    _pending[handle] = Pending(core_handle, finish, tensor)
    return handle


def lookup(handle):
    p = _pending.get(handle)
    if p is None:
        raise InvalidArgumentError("handle %r is unknown or was already synchronized" % (handle,))
    return p


def take(handle):
    p = _pending.pop(handle, None)
    if p is None:
        raise InvalidArgumentError("handle %r is unknown or was already synchronized" % (handle,))
    return p
