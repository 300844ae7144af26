"""Orders Perseus collectives inside MXNet's dependency engine, header-free (ctypes only).

A collective is pushed with ``MXEnginePushAsyncND``: MXNet calls our ``async_func`` on one of its
CPU worker threads once every op writing the inputs (and reading/writing the outputs) is done;
``async_func`` starts the collective and returns at once; the collective's completion (from any
thread) calls MXNet's ``on_complete``, which releases the ops waiting on the outputs. Python never
blocks, and MXNet's ``priority`` orders the pushes (the kCPUPrioritized pool is a priority queue).

ABI facts relied on (MXNet 1.9.1, see docs/mxnet.md "How it works"):
 - ``EngineAsyncFunc`` is ``void(RunContext*, CallbackOnComplete*, void* param)``; the
   CallbackOnComplete object lives on the engine's stack, so we copy its three pointers
   ``{callback, engine, param}`` before returning and call ``callback(engine, param, error)`` later.
 - ``error`` is a ``const dmlc::Error*``; MXNet copies it with dmlc::Error's copy constructor,
   which only copies the ``std::runtime_error`` base, so a ``std::runtime_error`` built with
   libstdc++'s exported constructor is a valid argument. The error then poisons the outputs:
   ``wait_to_read``/``asnumpy``/``waitall`` raise MXNetError naming the tensor and the cause.
 - NaiveEngine ignores that error; we also keep it in ``PendingOp.error`` so that callers that
   wait (``EngineOp.wait``) raise it in every engine mode.

When the engine API is missing (or ``use_engine=False``), ``push`` falls back to
``wait_to_read`` + DLPack, synchronously, on the calling thread.
"""
import ctypes
import ctypes.util
import itertools
import threading

import mxnet as mx
from mxnet.base import _LIB, check_call, c_handle_array

# mxnet/include/mxnet/engine.h FnProperty
K_NORMAL = 0
K_CPU_PRIORITIZED = 3
K_NO_SKIP = 7

_ASYNC_FUNC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_MX_COMPLETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class _OnComplete(ctypes.Structure):
    # mxnet::engine::CallbackOnComplete: callback_, engine_, param_ (engine.h:72-87, LP64).
    _fields_ = [("callback", ctypes.c_void_p), ("engine", ctypes.c_void_p),
                ("param", ctypes.c_void_p)]


class _MXContext(ctypes.Structure):
    _fields_ = [("dev_type", ctypes.c_int), ("dev_id", ctypes.c_int)]


class _DLContext(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("ctx", _DLContext), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class TensorView:
    """A raw view of an NDArray's memory, valid until ``release()``.

    Holds a DLPack reference (a copy of the C++ NDArray), so the memory outlives the Python
    array. Built on the thread that runs the collective's start (an engine worker when pushed),
    where the producer of the data has finished.
    """
    __slots__ = ("array", "data", "shape", "dtype", "device", "_managed")

    def __init__(self, array):
        self.array = array
        managed = ctypes.c_void_p()
        check_call(_LIB.MXNDArrayToDLPack(array.handle, ctypes.byref(managed)))
        self._managed = managed
        t = ctypes.cast(managed, ctypes.POINTER(_DLManagedTensor)).contents.dl_tensor
        self.data = (t.data or 0) + t.byte_offset
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.dtype = array.dtype
        # DLPack: 1 CPU, 2 GPU, 3 pinned CPU.
        self.device = t.ctx.device_id if t.ctx.device_type == 2 else -1

    def take_capsule(self):
        """A "dltensor" PyCapsule that now owns this view's DLPack reference (MXNet's own
        capsule destructor frees it unless a consumer, such as perseus._core, renames it)."""
        from mxnet.ndarray import ndarray as _nd
        managed, self._managed = self._managed, None
        return ctypes.pythonapi.PyCapsule_New(managed, _nd._c_str_dltensor, _nd._c_dlpack_deleter)

    def release(self):
        if self._managed is not None:
            check_call(_LIB.MXNDArrayCallDLPackDeleter(self._managed))
            self._managed = None


def _load_runtime_error():
    # std::runtime_error(const char*) / ~runtime_error() from the libstdc++ libmxnet links.
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        ctor = lib._ZNSt13runtime_errorC1EPKc
        dtor = lib._ZNSt13runtime_errorD1Ev
    except (OSError, AttributeError):
        return None, None
    ctor.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ctor.restype = None
    dtor.argtypes = [ctypes.c_void_p]
    dtor.restype = None
    return ctor, dtor


_RT_CTOR, _RT_DTOR = _load_runtime_error()
_RUNTIME_ERROR_BYTES = 64  # sizeof(std::runtime_error) is 16 on LP64; generous on purpose


def _engine_type():
    import os  # MXNet's own variable, read the way MXNet reads it (engine.cc)
    return os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice")


class PendingOp:
    """One pushed collective. ``error`` is None or the failure message once done."""
    __slots__ = ("name", "inputs", "outputs", "start", "done_event", "error", "_callback")

    def __init__(self, name, inputs, outputs, start):
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.start = start
        self.done_event = threading.Event()
        self.error = None
        self._callback = None

    def wait(self, timeout=None):
        """Blocks until the collective ran; raises its error as MXNetError."""
        if not self.done_event.wait(timeout):
            raise TimeoutError("perseus.mxnet: collective %r not done after %ss" %
                               (self.name, timeout))
        if self.error is not None:
            raise mx.base.MXNetError(self.error)


class EngineBridge:
    """Pushes collectives into MXNet's engine. One per process (``bridge()``).

    ``push(start, inputs, outputs, priority, name)``: ``start(in_views, out_views, complete)``
    runs when the inputs are ready (on an MXNet worker thread, holding the GIL briefly); it
    must not block, and must arrange for ``complete(error_message_or_None)`` to be called
    exactly once, from any thread. Arrays in ``outputs`` are written by the collective; an
    array in both lists is passed once, as mutable (in place).
    """

    def __init__(self, use_engine=None, prop=K_CPU_PRIORITIZED):
        available = hasattr(_LIB, "MXEnginePushAsyncND") and hasattr(_LIB, "MXNDArrayToDLPack")
        self.use_engine = available if use_engine is None else (use_engine and available)
        self.naive = _engine_type() == "NaiveEngine"
        self._prop = ctypes.c_int(prop)
        self._ctx = _MXContext(1, 0)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending = {}  # id -> PendingOp; guarded by _lock
        self._async_func = _ASYNC_FUNC(self._on_start)  # kept alive for the process lifetime
        # Arguments of every push that do not change (built once: ctypes objects are slow).
        self._async_func_ref = self._async_func
        self._ctx_ref = ctypes.byref(self._ctx)
        self._prop_ref = ctypes.byref(self._prop)
        self._complete_fns = {}  # MXNet on_complete function pointer -> ctypes wrapper

    # -- pushing (framework thread) --------------------------------------------------------
    def push(self, start, inputs, outputs, priority=0, name="perseus", after=()):
        """``after``: more arrays the op writes in the engine's eyes only (not passed to
        ``start``), to serialise it after earlier ops on them."""
        inputs, outputs = list(inputs), list(outputs)
        if after:
            out_handles = {o.handle.value for o in outputs}
            mutable = outputs + [a for a in after if a.handle.value not in out_handles]
        else:
            mutable = outputs
        seen = {o.handle.value for o in mutable}
        const = []
        for a in inputs:  # the engine must not see one var twice (CheckDuplicate is fatal)
            h = a.handle.value
            if h not in seen:
                seen.add(h)
                const.append(a)
        op = PendingOp(name, inputs, outputs, start)
        if not self.use_engine:
            self._run_sync(op)
            return op
        op_id = next(self._ids)
        with self._lock:
            self._pending[op_id] = op
        check_call(_LIB.MXEnginePushAsyncND(
            self._async_func_ref, ctypes.c_void_p(op_id), None, self._ctx_ref,
            c_handle_array(const) if const else None, len(const),
            c_handle_array(mutable) if mutable else None, len(mutable),
            self._prop_ref, int(priority), ("perseus:" + str(name)).encode(), False))
        if self.naive:  # NaiveEngine ran it inline and dropped the error: raise it here
            op.wait()
        return op

    def _run_sync(self, op):
        # Fallback: no engine ordering; wait for the producers, run, block until done.
        for a in op.inputs:
            a.wait_to_read()
        for a in op.outputs:
            check_call(_LIB.MXNDArrayWaitToWrite(a.handle))
        done = threading.Event()
        self._start(op, lambda err: done.set())
        done.wait()
        op.wait()

    # -- engine side ---------------------------------------------------------------------
    def _on_start(self, _rctx, on_complete_ptr, param):
        # On an MXNet worker thread. Copy on_complete first: it is the engine's stack local.
        cb = _OnComplete.from_buffer_copy(
            ctypes.string_at(on_complete_ptr, ctypes.sizeof(_OnComplete)))
        with self._lock:
            op = self._pending.pop(param or 0, None)
        if op is None:  # cannot happen; never leave the engine waiting
            _MX_COMPLETE(cb.callback)(cb.engine, cb.param, None)
            return
        op._callback = cb
        try:
            self._start(op, lambda err, op=op: self._complete(op, err))
        except BaseException as e:  # noqa: BLE001 - must reach MXNet, never escape into C
            self._complete(op, "perseus.mxnet: %s failed to start: %s" % (op.name, e))

    def _start(self, op, complete):
        views_in, views_out = [], []
        fired = []

        def finish(err):
            if fired:
                return
            fired.append(True)
            for v in views_in + views_out:
                v.release()
            op.error = err
            complete(err)
            op.done_event.set()

        try:
            views_in = [TensorView(a) for a in op.inputs]
            views_out = [TensorView(a) for a in op.outputs]
            op.start(views_in, views_out, finish)
        except BaseException as e:  # noqa: BLE001
            finish("perseus.mxnet: collective %r failed: %s: %s" % (op.name, type(e).__name__, e))

    def _complete(self, op, err):
        cb = op._callback
        op._callback = None
        fn = self._complete_fns.get(cb.callback)
        if fn is None:  # MXNet passes one function for every op: build its wrapper once
            fn = self._complete_fns[cb.callback] = _MX_COMPLETE(cb.callback)
        if err is None or _RT_CTOR is None:
            fn(cb.engine, cb.param, None)
            return
        buf = ctypes.create_string_buffer(_RUNTIME_ERROR_BYTES)
        _RT_CTOR(buf, str(err).encode("utf-8", "replace"))
        try:
            fn(cb.engine, cb.param, ctypes.cast(buf, ctypes.c_void_p))
        finally:
            _RT_DTOR(buf)


_bridge = None
_bridge_lock = threading.Lock()


def bridge():
    """The process-wide EngineBridge."""
    global _bridge
    with _bridge_lock:
        if _bridge is None:
            _bridge = EngineBridge()
        return _bridge
