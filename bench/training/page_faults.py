"""Minor page faults of this process, for the training benches' rows.

glibc gives the top of the heap back to the kernel once more than its trim threshold is free
there, and the next step's tensors fault those pages in again (zeroed). Whether a rank's
process falls into that every step depends on the order of its allocations and frees, not on
what its backend sends: on bench/training's model under DDP one process takes none and the
next about 4000 a step (16 MB zeroed), a step's time moving by several ms. The rows carry
the count so that a figure can be read with it.
"""
import ctypes
import os


def minor_faults():
    """Minor page faults of this process so far; 0 where /proc/self/stat does not exist."""
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0


def thread_minor_faults():
    """{thread id: (thread name, minor page faults so far)} of this process's threads; {} where
    /proc/self/task does not exist. Which thread takes a process's faults: its compute, or a
    library's own threads."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                stat = f.read()
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
            if tid == str(os.getpid()):
                name = "main"  # other threads keep their name, which is the program's unless set
            out[tid] = (name, int(stat.rsplit(")", 1)[1].split()[7]))
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return out


def thread_faults_between(before, after, per=1):
    """{thread name: faults per `per`} of the threads that faulted between two
    thread_minor_faults() readings, most first (threads of one name summed)."""
    by_name = {}
    for tid, (name, count) in after.items():
        by_name[name] = by_name.get(name, 0) + count - before.get(tid, (name, 0))[1]
    return {k: round(v / per) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
                .split()]


def _mallinfo2():
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None  # not glibc, or glibc before 2.33
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def heap_bytes():
    """The bytes glibc's malloc holds from the kernel (the main heap and its arenas, and the
    chunks it mapped alone); None where mallinfo2 does not exist. It grows while the heap
    fragments into a shape the program's allocations fit, and stays once they fit."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.arena + info.hblkhd
