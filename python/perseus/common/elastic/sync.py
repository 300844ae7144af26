"""The collective decision, after a reset, of whether to sync elastic state and from which rank.

Every rank of the new membership calls agree() from the training thread with what it knows of
itself; one allgather gives every rank the same table, and decide() turns that table into the
same answer everywhere. No rank decides alone, so the ranks cannot disagree on whether a sync
happens (Horovod's #3494 deadlock came from ranks taking different skip_sync branches), and the
state comes from a rank that holds the newest commit rather than from rank 0 by default.
"""

import numpy as np

from perseus.common import basics
from perseus.common.process_sets import global_process_set, process_set_id

# A process that has neither committed nor received state (a new worker, or any worker before
# its first sync) holds no state: it never wins the choice of the source.
NO_STATE = -1


def decide(commits, needs):
    """(do_sync, source_rank, newest) from every rank's commit counter (NO_STATE for none) and
    its "I need a sync" flag, both indexed by rank. A sync happens when any rank asks for one or
    the counters differ; the source is the lowest rank holding the newest commit."""
    if len(commits) != len(needs) or not commits:
        raise ValueError("decide: %d commit counters for %d flags" % (len(commits), len(needs)))
    newest = max(commits)
    source = min(r for r, c in enumerate(commits) if c == newest)
    do_sync = any(needs) or any(c != newest for c in commits)
    return do_sync, source, newest


def agree(commit, need):
    """Collective over the whole job: decide() over every rank's (commit, need)."""
    table = np.array([int(commit), 1 if need else 0], dtype=np.int64)
    handle = basics.core().allgather("elastic.sync_decision", table,
                                     process_set_id(global_process_set))
    handle.wait()
    rows = handle.output(0).reshape(-1, 2)
    return decide([int(c) for c in rows[:, 0]], [bool(n) for n in rows[:, 1]])
