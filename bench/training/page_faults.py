"""Minor page faults of this process, for the training benches' rows.

glibc gives the top of the heap back to the kernel once more than its trim threshold is free
there, and the next step's tensors fault those pages in again (zeroed). Whether a rank's
process falls into that every step depends on the order of its allocations and frees, not on
what its backend sends: on bench/training's model under DDP one process takes none and the
next about 4000 a step (16 MB zeroed), a step's time moving by several ms. The rows carry
the count so that a figure can be read with it.
"""


def minor_faults():
    """Minor page faults of this process so far; 0 where /proc/self/stat does not exist."""
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0
