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
fails before init() would fail every spare alike).

A spare says when it has warmed up (elastic/ready/<spare id>): a slot goes to a spare that has
warmed up if there is one on its host, else to the oldest (the nearest to ready). Spares start
together, not one after another: their start-up waits on files as much as on the CPU, so on a
busy host three started at once are all ready long before the third of three started in turn,
and the first is ready barely later. But none starts while a new worker of the job is still
starting (a spare given a slot before it had warmed up, or a new process): that one is needed
now, and another start-up beside it would slow it down."""

import signal
import time

from perseus.rendezvous import elastic as keys
from perseus.runner.process import describe_exit


class Spares:
    def __init__(self, wanted, store, launch, log, note=None):
        """launch(spare id, host) starts a process (a driver Worker with no slot) with
        keys.SPARE_ENV set to the spare id. log: what the user must see; note: what
        --verbose shows."""
        self.wanted = wanted
        self.store = store
        self.launch = launch
        self.log = log
        self.note = note or (lambda msg: None)
        self.waiting = []  # spares started and not yet given a slot, oldest first
        self.ended = []  # spares stopped or exited, for the driver's stop()
        self.started = 0

    def keep(self, hosts, blacklist, newcomer_starting=False):
        """Stops the spares of hosts that discovery no longer lists (or that are blacklisted),
        notes those that have warmed up, and starts spares on the first usable host until
        `wanted` wait, unless a new worker is still starting (`newcomer_starting`)."""
        self._reap()
        usable = [h for h in hosts if not blacklist.contains(h)]
        for w in [w for w in self.waiting if w.host not in usable]:
            w.proc.signal_group(signal.SIGTERM)
            self._drop(w)
        now = time.monotonic()
        for w in self.waiting:
            self._warm(w, now)
        while usable and len(self.waiting) < self.wanted and not newcomer_starting:
            self.started += 1
            self.waiting.append(self.launch("spare%d" % self.started, usable[0]))

    def _warm(self, w, now):
        """Whether spare `w` has warmed up (read from the store until it has)."""
        if w.ready_at is None and self.store.get(keys.ready(w.wid)) == b"1":
            w.ready_at = now
            self.note("spare worker %s is ready (%.1f s after it started)"
                      % (w.wid, now - w.started_at))
        return w.ready_at is not None

    def take(self, host, wid, first_epoch):
        """A spare on `host`, given the slot `wid` (its worker id from now on) of memberships
        from `first_epoch` on; None when no spare waits there."""
        self._reap()
        now = time.monotonic()
        here = [w for w in self.waiting if w.host == host]  # oldest first
        if not here:
            return None
        w = ([x for x in here if self._warm(x, now)] or here)[0]
        self.waiting.remove(w)
        self.store.set(keys.spare(w.wid), ("%s %d" % (wid, first_epoch)).encode())
        return w

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
