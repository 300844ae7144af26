"""Lifetime and topology (Horovod's horovod/common/basics.py over perseus._core).

Thread safety: init/shutdown from one thread (as in Horovod); the getters from any."""

import atexit
import os
import threading

from perseus.common import horovod_env
from perseus.common.exceptions import NotInitializedError
from perseus.common.native import core
from perseus.common.process_sets import _forget_all, add_process_set

_lock = threading.Lock()
_topology = None
_atexit_registered = False
_NOT_INITIALIZED = "Perseus has not been initialized; use hvd.init()."
_SHUT_DOWN = ("Perseus has been shut down (hvd.shutdown()); call hvd.init() again to rejoin "
              "the job.")
_was_shut_down = False


def _plain_start(start):
    start()


_join = _plain_start  # init()'s join hook: set_join_hook


def set_join_hook(hook):
    """Makes the first init() of a process (and the first after each shutdown()) call
    hook(start) where it would call start(), the core's rendezvous: perseus.common installs the
    elastic worker's join, which waits for a membership and starts again when one fails while
    it starts. None restores the plain start()."""
    global _join
    _join = hook or _plain_start


def init(comm=None, process_sets=None):
    """Rendezvous with every rank (started by perseusrun or mpirun) and start the engine.
    Idempotent. comm: None, or the list of all ranks (sub-communicators are process sets in
    Perseus). process_sets: ProcessSet objects to register now, or "dynamic" (always on)."""
    global _topology, _atexit_registered, _was_shut_down
    c = core()
    ignored = horovod_env.apply_before_init()
    first = not c.is_initialized()
    if first:
        _join(c.init)
    else:
        c.init()
    with _lock:
        _topology = c.topology()
        _was_shut_down = False
    if first:
        horovod_env.report(ignored, _params().keys(), _topology["rank"])
    with _lock:
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    if comm is not None and sorted(int(r) for r in comm) != list(range(_topology["size"])):
        raise ValueError("init(comm=%r): Perseus always initializes every rank of the job; use "
                         "add_process_set(%r) for collectives on a subset" % (comm, comm))
    if process_sets is not None and not isinstance(process_sets, str):
        for ps in process_sets:
            add_process_set(ps)


def _at_exit():
    shutdown()
    core()._stop_callbacks()


def shutdown():
    """Stops the engine; pending operations fail with ShutDownError. Safe to call twice."""
    global _topology, _was_shut_down
    with _lock:
        _was_shut_down = _was_shut_down or _topology is not None
        _topology = None
    try:
        c = core()
    except ImportError:
        return
    if c.is_initialized():
        c.shutdown()
    _forget_all()


def is_initialized():
    try:
        return bool(core().is_initialized())
    except ImportError:
        return False


def topology():
    """dict of rank, size, local_rank, local_size, cross_rank, cross_size."""
    with _lock:
        t = _topology
    if t is None:
        raise NotInitializedError(_SHUT_DOWN if _was_shut_down else _NOT_INITIALIZED)
    return t


def rank():
    return topology()["rank"]


def size():
    return topology()["size"]


def local_rank():
    return topology()["local_rank"]


def local_size():
    return topology()["local_size"]


def cross_rank():
    return topology()["cross_rank"]


def cross_size():
    return topology()["cross_size"]


def is_homogeneous():
    """True: perseusrun fills every host with the same slot count in practice."""
    return size() == local_size() * cross_size()


def info_fields(text):
    """The core's "key=value" texts (build_info, runtime_info) as a dict: 'a=1 b=x y' ->
    {'a': '1', 'b': 'x y'}; a value runs to the next 'key=' (an error text holds spaces)."""
    out, key = {}, None
    for word in text.split(" "):
        name, eq, value = word.partition("=")
        if eq and name.isidentifier():
            key = name
            out[key] = value
        elif key is not None:
            out[key] += " " + word
    return out


def build_flags():
    """perseus_build_info() as a dict, e.g. {'cpu': '1', 'cuda': '0', 'nccl': '0', ...}."""
    return info_fields(core().build_info())


def _params():
    """Every setting of the core's parameter table: {PERSEUS_* name: value in effect}."""
    out = {}
    for line in core().params_dump().splitlines():
        head = line.split("\t", 1)[0]
        if "=" in head:
            name, value = head.split("=", 1)
            out[name] = value
    return out


def _flag(key):
    try:
        return build_flags().get(key, "0") not in ("0", "")
    except ImportError:
        return False


def mpi_built():
    """Whether libperseus was built with MPI (the PERSEUS_CPU_OPERATIONS=mpi data plane)."""
    return _flag("mpi")


def mpi_enabled():
    """As Horovod: whether MPI is in use in this job. Horovod's MPI controller runs wherever an
    MPI launcher started the ranks (mpirun, mpiexec, horovodrun's MPI mode), so: ranks started
    by Open MPI's mpirun (perseusrun --mpi too) or by Hydra's mpiexec (MPICH, Intel MPI), or a
    job on the MPI data plane (PERSEUS_CPU_OPERATIONS=mpi, HOROVOD_CPU_OPERATIONS=MPI). False
    before init() and where libperseus was built without MPI."""
    if not (is_initialized() and mpi_built()):
        return False
    if _params().get("PERSEUS_CPU_OPERATIONS", "").lower() == "mpi":
        return True
    return _started_by_mpi_launcher(os.environ)


def _started_by_mpi_launcher(env):
    """Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; Hydra sets PMI_SIZE with MPI_LOCALNRANKS
    (srun's PMI sets PMI_SIZE alone)."""
    return "OMPI_COMM_WORLD_SIZE" in env or ("PMI_SIZE" in env and "MPI_LOCALNRANKS" in env)


def mpi_threads_supported():
    """Perseus never asks MPI for MPI_THREAD_MULTIPLE; Horovod returns False then too. Raises
    before init(), as Horovod does."""
    topology()
    return False


def gloo_built():
    """False: Perseus has no Gloo. Its own TCP and shared-memory planes do what Horovod's Gloo
    controller and CPU operations do (horovodrun --gloo is accepted by perseusrun)."""
    return False


def gloo_enabled():
    """False: Gloo is never in use (see gloo_built)."""
    return False


def nccl_built():
    """As Horovod: NCCL's version code (e.g. 22803, NCCL_VERSION_CODE of the nccl.h that
    libperseus was built with), or 0 without NCCL."""
    try:
        value = build_flags().get("nccl", "0")
    except ImportError:
        return 0
    return int(value) if value.isdigit() else 0


def cuda_built():
    """Whether libperseus was built with CUDA support (CUDA tensors, NCCL)."""
    return _flag("cuda")


def rocm_built():
    """False: Perseus has no ROCm backend."""
    return False


def ddl_built():
    """False: Perseus has no IBM DDL backend (neither has Horovod 0.28 any more)."""
    return False


def ccl_built():
    """False: Perseus has no oneCCL backend."""
    return False


def engine_stats():
    """This rank's engine counters since init() (a Perseus extension, not in Horovod): cycles,
    control_exchanges and control_bytes (the one AND per process set and cycle that negotiates
    cached tensors), coordinator_rounds (negotiations of new names through the set's
    coordinator), cached_responses, coordinated_responses and negotiation_ns (time spent
    negotiating), posted_allreduces and posted_collectives (small allreduces, and small
    collectives of every kind, that skipped negotiation: Note [Posted collectives]). Differences between two calls give the cost of the steps in between."""
    return core().engine_stats()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing this rank's Chrome-trace timeline to `file_path` (several ranks of a job:
    `t.json` becomes `t.<rank>.json`), replacing a timeline already running. mark_cycles adds
    one CYCLE span per engine cycle. As Horovod, it raises before init()."""
    topology()
    core().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline; the file is complete, valid JSON when this returns."""
    topology()
    core().stop_timeline()
