"""Note [Spare workers]: perseusrun --spare-workers N keeps N worker processes started ahead
of need, also while the job is at --max-np (a member lost makes room, and the slot that
discovery lists then finds a spare that has long finished its start-up). A spare runs the
training script with no slot: it imports its framework, warms up
(perseus.common.elastic.worker.before_ready) and waits in init() (worker._wait_for_a_slot).
When discovery adds a slot on the spare's host, the driver gives the slot to the spare instead
of starting a process for it, so the new worker is ready within a store round trip rather than
after its imports (seconds: importing torch alone takes several). A spare is never a member:
it does not count toward --min-np/--max-np, a failed spare blacklists nothing, and a spare
that exits before it is given a slot stops the driver from starting others (a script that
fails before init() would fail every spare alike)."""

import signal

from perseus.rendezvous import elastic as keys
from perseus.runner.process import describe_exit


class Spares:
    def __init__(self, wanted, store, launch, log):
        """launch(spare id, host) starts a process (a driver Worker with no slot) with
        keys.SPARE_ENV set to the spare id."""
        self.wanted = wanted
        self.store = store
        self.launch = launch
        self.log = log
        self.waiting = []  # spares started and not yet given a slot, oldest first
        self.ended = []  # spares stopped or exited, for the driver's stop()
        self.started = 0

    def keep(self, hosts, blacklist):
        """Stops the spares of hosts that discovery no longer lists (or that are blacklisted)
        and starts spares on the first usable host until `wanted` wait."""
        self._reap()
        usable = [h for h in hosts if not blacklist.contains(h)]
        for w in [w for w in self.waiting if w.host not in usable]:
            w.proc.signal_group(signal.SIGTERM)
            self._drop(w)
        while usable and len(self.waiting) < self.wanted:
            self.started += 1
            self.waiting.append(self.launch("spare%d" % self.started, usable[0]))

    def take(self, host, wid, first_epoch):
        """A spare on `host`, given the slot `wid` (its worker id from now on) of memberships
        from `first_epoch` on; None when no spare waits there."""
        self._reap()
        for w in self.waiting:
            if w.host == host:
                self.waiting.remove(w)
                self.store.set(keys.spare(w.wid), ("%s %d" % (wid, first_epoch)).encode())
                return w
        return None

    def processes(self):
        return self.waiting + self.ended

    def _reap(self):
        for w in list(self.waiting):
            w.code = w.proc.poll()
            if w.code is not None:
                self._drop(w)
                if self.wanted:
                    self.log("spare worker %s %s before it was needed; starting no more "
                             "spares" % (w.wid, describe_exit(w.code)))
                    self.wanted = 0

    def _drop(self, w):
        self.waiting.remove(w)
        self.ended.append(w)
