"""Process sets (Horovod's horovod/common/process_sets.py). Registration is collective: every
rank calls add_process_set/remove_process_set with the same ranks, in the same order."""

import threading

from perseus.common.native import core
from perseus.common.exceptions import InvalidArgumentError

_lock = threading.Lock()
_registered = {}  # id -> ProcessSet


class ProcessSet:
    """A group of global ranks that collectives can run on (process_set=...)."""

    def __init__(self, ranks_or_comm):
        if ranks_or_comm is not None and not isinstance(ranks_or_comm, (list, tuple, range)):
            raise InvalidArgumentError("ProcessSet takes a list of ranks (mpi4py communicators "
                                       "are not supported), got %r" % (ranks_or_comm,))
        self.ranks = None if ranks_or_comm is None else sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks, or None while not registered."""
        if self.process_set_id is None:
            return None
        return core().process_set_info(self.process_set_id)[1]

    def rank(self):
        """This rank's index in the set (-1 when not a member), or None while not registered."""
        if self.process_set_id is None:
            return None
        return core().process_set_info(self.process_set_id)[0]

    def included(self):
        """Whether this rank belongs to the set (None while not registered)."""
        r = self.rank()
        return None if r is None else r >= 0

    def __eq__(self, other):
        return (isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id
                and self.ranks == other.ranks)

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks or ())))

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        super().__init__(None)
        self.process_set_id = 0

    def _invalidate(self):
        pass  # the global set survives shutdown/init


global_process_set = _GlobalProcessSet()


def add_process_set(process_set):
    """Registers `process_set` (a ProcessSet or a list of ranks) on every rank; returns it."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise InvalidArgumentError("%r is already registered" % (process_set,))
    if process_set.ranks is None:
        raise InvalidArgumentError("add_process_set needs a list of ranks")
    pid = core().add_process_set(process_set.ranks)
    process_set.process_set_id = pid
    with _lock:
        _registered[pid] = process_set
    return process_set


def remove_process_set(process_set):
    """Unregisters the set on every rank. Returns False for the global set or an unregistered
    one (as Horovod does), True otherwise."""
    pid = process_set.process_set_id
    if pid is None or pid == 0:
        return False
    core().remove_process_set(pid)
    with _lock:
        _registered.pop(pid, None)
    process_set._invalidate()
    return True


def process_set_id(process_set):
    """The C API id for a ProcessSet, an int id, or None (global)."""
    if process_set is None:
        return 0
    if isinstance(process_set, int):
        return process_set
    pid = getattr(process_set, "process_set_id", None)
    if pid is None:
        raise InvalidArgumentError("%r is not registered; call add_process_set first"
                                   % (process_set,))
    return pid


def set_root(pid, root_rank):
    """The set-relative index the core takes for `root_rank`, which names the root by its rank
    in the whole job (Horovod's meaning for broadcasts on a process set)."""
    root_rank = int(root_rank)
    if pid <= 0:  # the global set; negative ids are the core's own host-local sets
        return root_rank
    with _lock:
        ps = _registered.get(pid)
    ranks = ps.ranks if ps is not None else None
    if ranks is None:
        raise InvalidArgumentError("process set %d is not registered; call add_process_set first"
                                   % pid)
    try:
        return ranks.index(root_rank)
    except ValueError:
        raise InvalidArgumentError(
            "root_rank %d is not a member of process set %d (ranks %s); root_rank is a rank of "
            "the whole job, as in Horovod" % (root_rank, pid, ranks)) from None


def _forget_all():
    """At shutdown every registration ends."""
    with _lock:
        sets = list(_registered.values())
        _registered.clear()
    for ps in sets:
        ps._invalidate()
