"""perseusrun's elastic mode (docs/elastic.md): it starts workers on the hosts that discovery
reports, publishes each membership in the rendezvous store under a new epoch number
(perseus/rendezvous/elastic.py lists the keys), and replaces a membership when a worker fails, a
worker reports a failure, or hosts come and go. One thread (perseusrun's main thread) runs the
loop; the workers' output pumps are the only other threads.

Rules (Horovod's where it has one):
  - a worker that exits non-zero or is killed leaves the job; its slot is blacklisted, and its
    host too once every worker it had has failed (for the cooldown range, or for good);
  - surviving members keep their relative rank order; new workers are appended;
  - below --min-np the driver waits up to --elastic-timeout for hosts, then fails;
  - after --reset-limit new memberships it fails;
  - the job is over when a member exits 0: the driver waits for the other members to end, and
    perseusrun exits 0 when every one of them exited 0 (horovodrun's rule).
"""

import collections
import os
import signal
import sys
import time

from perseus.rendezvous import elastic as keys
from perseus.runner import env as envmod
from perseus.runner import hosts as hostmod
from perseus.runner.discovery import Blacklist
from perseus.runner.elastic.spares import Spares
from perseus.runner.process import LaunchedProcess, describe_exit, exit_status
from perseus.runner.remote import env_block, ssh_argv
from perseus.runner.wording import Throttle, count

DISCOVERY_INTERVAL_S = 1.0
LOOP_INTERVAL_S = 0.05
KILL_GRACE_S = 3.0
# How long a member that its peers timed out on may take to report the failure itself (then it
# is not hung, only behind the one that is) before it is stopped as unresponsive.
UNRESPONSIVE_GRACE_S = 1.0
# After the first member finishes, how long the others may take to finish too.
FINISH_GRACE_S = 60.0
# How long newcomers started together that are ready wait for those of them that are not yet
# (Note [Newcomers start before they are published]): one reset of the members for all of
# them, but a newcomer never waits for another's start-up for longer than this.
JOIN_TOGETHER_S = 0.5


def _log(msg):
    print("perseusrun: %s" % msg, file=sys.stderr, flush=True)


class ElasticError(Exception):
    """Ends the job: perseusrun prints the message and exits non-zero."""


class Worker:
    """One worker process; `wid` ("host:slot") is its identity across memberships."""

    def __init__(self, wid, host, slot, index, proc):
        self.wid, self.host, self.slot, self.index, self.proc = wid, host, slot, index, proc
        self.code = None
        self.started_at = time.monotonic()  # as a newcomer: when it was given its slot
        self.ready_at = None  # as a newcomer: when the driver first saw it ready
        self.stopped_since = None  # when the driver first saw its process stopped (SIGSTOP)
        self.removed = False  # stopped because discovery no longer lists its slot

    def alive(self):
        return self.code is None


def place(members):
    """SlotInfo per member, in rank order: local ranks count the earlier members of the same
    host; the cross group of local rank L is the hosts with an L-th member, in the order of
    their lowest rank (what the core derives from the host names: derivePlacement)."""
    local_size = collections.Counter(w.host for w in members)
    seen = collections.Counter()
    local = []
    for w in members:
        local.append(seen[w.host])
        seen[w.host] += 1
    host_order = list(dict.fromkeys(w.host for w in members))
    hosts_with = collections.defaultdict(list)
    for lr in set(local):
        hosts_with[lr] = [h for h in host_order if local_size[h] > lr]
    return [hostmod.SlotInfo(r, len(members), w.host, lr, local_size[w.host],
                             hosts_with[lr].index(w.host), len(hosts_with[lr]))
            for r, (w, lr) in enumerate(zip(members, local))]


class ElasticDriver:
    def __init__(self, args, discovery, store, base_env, sink, start_timeout_s, guard=None):
        self.args = args
        self.guard = guard
        self.discovery = discovery
        self.store = store
        self.base_env = base_env
        self.sink = sink
        self.min_np = args.min_np if args.min_np is not None else args.np
        self.max_np = args.max_np
        self.reset_limit = args.reset_limit
        self.elastic_timeout = float(args.elastic_timeout if args.elastic_timeout is not None
                                     else os.environ.get("HOROVOD_ELASTIC_TIMEOUT", 600))
        self.join_timeout = start_timeout_s
        self.timeout_s = float(base_env.get("PERSEUS_TIMEOUT") or 30.0)
        self.blacklist = Blacklist(tuple(args.blacklist_cooldown_range)
                                   if args.blacklist_cooldown_range else None)
        self.workers = []  # every worker ever started (a spare once it is given a slot)
        self.launched = 0  # processes started, spares included: the next output prefix
        self.spares = Spares(getattr(args, "spare_workers", None) or 0, store,
                             self._launch_spare, _log, _log if args.verbose else None)
        self.members = []  # the current epoch's, in rank order
        self.starting = []  # started newcomers not yet published
        self.epoch = 0
        self.resets = 0
        self.published_at = 0.0
        self.hosts = {}
        self.hosts_unresolved = set()  # listed by discovery, but their names do not resolve
        self.next_discovery = 0.0
        self.waiting_since = None
        self.finishing_since = None
        self.dirty = False  # the current membership lost a member or saw a failure
        self._discovery_warning = Throttle(_log)  # a failing script would log every second

    # --- discovery -------------------------------------------------------------------------
    def _discover(self, now):
        if now < self.next_discovery:
            return
        self.next_discovery = now + DISCOVERY_INTERVAL_S
        try:
            hosts = self.discovery.find()
        except RuntimeError as e:
            self._discovery_warning("%s; keeping the last host list" % e)
            return
        bad = hostmod.unresolvable(hosts)
        for host, why in bad.items():
            if host not in self.hosts_unresolved:
                _log("host %s does not resolve (%s): leaving it out while it does not"
                     % (host, why))
        self.hosts_unresolved = set(bad)
        self.hosts = {h: n for h, n in hosts.items() if h not in bad}

    def _free_slots(self):
        """(host, slot) pairs that discovery offers and no live worker holds, in order."""
        held = {(w.host, w.slot) for w in self.workers if w.alive()}
        free = []
        for host, slots in self.hosts.items():
            if self.blacklist.contains(host):
                continue
            for slot in range(slots):
                if (host, slot) not in held and not self.blacklist.contains((host, slot)):
                    free.append((host, slot))
        return free

    # --- workers ---------------------------------------------------------------------------
    def _spawn(self, host, slot, info):
        wid = "%s:%d" % (host, slot)
        # A worker id comes back when its slot is listed again: the new process must not take
        # the old one's place in a membership published before it started.
        w = self._launch(wid, host, slot, info, {"PERSEUS_ELASTIC_WORKER_ID": wid,
                                                 keys.FIRST_EPOCH_ENV: str(self.epoch + 1)})
        self.workers.append(w)
        if self.args.verbose:
            _log("started worker %s (output prefix [%d], pid %d)" % (wid, w.index,
                                                                      w.proc.popen.pid))
        return w

    def _launch_spare(self, spare_id, host):
        """Note [Spare workers] (runner/elastic/spares.py). Its rank variables are a guess that
        its first membership's assignment replaces, as a newcomer's are."""
        info = place(self.members + [Worker(spare_id, host, -1, -1, None)])[-1]
        w = self._launch(spare_id, host, None, info, {keys.SPARE_ENV: spare_id})
        if self.args.verbose:
            _log("started spare worker %s on %s (output prefix [%d], pid %d)"
                 % (spare_id, host, w.index, w.proc.popen.pid))
        return w

    def _from_spare(self, host, slot, wid):
        """A spare waiting on `host`, given the slot; None when there is none."""
        w = self.spares.take(host, wid, self.epoch + 1)
        if w is None:
            return None
        warm = w.ready_at is not None
        spare_id, w.wid, w.slot, w.ready_at = w.wid, wid, slot, None
        self.workers.append(w)
        if self.args.verbose:
            _log("started worker %s from spare %s (output prefix [%d], pid %d), %s"
                 % (wid, spare_id, w.index, w.proc.popen.pid,
                    "warmed up" if warm else "still warming up"))
        return w

    def _launch(self, wid, host, slot, info, identity):
        index = self.launched
        self.launched += 1
        env = dict(self.base_env)
        env.update(envmod.rank_env(info))
        env.update(identity)
        if hostmod.is_local(host):
            proc = LaunchedProcess(self.args.command, env, index, host, self.sink,
                                   guard=self.guard)
        else:
            remote = envmod.forwardable(env)
            remote["PERSEUS_SECRET"] = env["PERSEUS_SECRET"]
            argv = ssh_argv(host, self.args.command, self.args.ssh_port,
                            self.args.ssh_identity_file)
            proc = LaunchedProcess(argv, None, index, host, self.sink,
                                   stdin_data=env_block(remote), guard=self.guard)
        return Worker(wid, host, slot, index, proc)

    def _kill(self, w, sig=signal.SIGKILL):
        w.proc.signal_group(sig)

    def _reap(self):
        """Collects exits; returns the members that exited since the last call."""
        ended = []
        for w in self.workers:
            if w.code is None:
                code = w.proc.poll()
                if code is not None:
                    w.code = code
                    ended.append(w)
        for w in ended:
            if w in self.members and (w.code != 0 or w.removed):
                _log("worker %s (rank %d of epoch %d) %s" % (
                    w.wid, self.members.index(w), self.epoch, describe_exit(w.code)))
                if not w.removed:
                    self._blacklist_failed(w)
                self.dirty = True
            elif w in self.members and self.finishing_since is None:
                self.finishing_since = time.monotonic()
        return ended

    def _blacklist_failed(self, w):
        self.blacklist.add((w.host, w.slot))
        # A new worker still starting proves nothing about its host (Note [Newcomers start
        # before they are published]); counted, it would keep a dead host off the blacklist.
        on_host = [x for x in self.workers if x.host == w.host and (
            x is w or x in self.members or (x.alive() and x not in self.starting))]
        if on_host and all(x.code not in (None, 0) for x in on_host):
            delay = self.blacklist.add(w.host)
            _log("host %s blacklisted %s: every worker it had failed" % (
                w.host, "for good" if delay is None else "for %.0f s" % delay))

    # --- memberships -----------------------------------------------------------------------
    def _publish(self, members):
        self.starting = [w for w in self.starting if w not in members]
        epoch = self.epoch + 1
        infos = place(members)
        for w, info in zip(members, infos):
            self.store.set(keys.assignment(epoch, w.wid), keys.encode_assignment(info))
        if self.epoch:
            self.store.set(keys.abort(self.epoch), b"1")
        self.store.set(keys.EPOCH, str(epoch).encode())
        self.epoch = epoch
        self.members = members
        self.published_at = time.monotonic()
        self.dirty = False
        self.waiting_since = None
        _log("epoch %d: %s (%s)" % (epoch, count(len(members), "worker"),
                                    ", ".join(w.wid for w in members)))

    def _next_membership(self, now):
        """Publishes the next membership if one is due; raises ElasticError at a limit."""
        joining = self._joining(now)
        survivors = [w for w in self.members if w.alive()] + joining
        room = (self.max_np if self.max_np is not None else 1 << 30) - len(survivors) - len(
            [w for w in self.starting if w not in joining])
        free = self._free_slots()[:max(0, room)]
        if self.epoch and free:
            self._start_newcomers(survivors, free)
            free = []
        if not self.dirty and not free and not joining:
            return
        if len(survivors) + len(free) < self.min_np:
            if self.waiting_since is None:
                self.waiting_since = now
                if self.epoch:
                    self.store.set(keys.abort(self.epoch), b"1")
                _log("%s available, --min-np is %d: waiting up to %.0f s "
                     "(--elastic-timeout) for more from %s"
                     % (count(len(survivors) + len(free), "worker"), self.min_np,
                        self.elastic_timeout,
                        self.discovery.describe()))
            if now - self.waiting_since > self.elastic_timeout:
                raise ElasticError(
                    "timed out after %.0f s (--elastic-timeout) waiting for at least %s "
                    "(--min-np) from %s; %d available%s" % (
                        self.elastic_timeout, count(self.min_np, "worker"),
                        self.discovery.describe(),
                        len(survivors) + len(free), self._blacklist_note()))
            return
        if self.epoch and self.reset_limit is not None and self.resets >= self.reset_limit:
            raise ElasticError("the membership changed %d times, the --reset-limit; stopping"
                               % self.resets)
        new_infos = place(survivors + [Worker("%s:%d" % hs, hs[0], hs[1], -1, None)
                                       for hs in free])
        added = [self._spawn(host, slot, info)
                 for (host, slot), info in zip(free, new_infos[len(survivors):])]
        if self.epoch:
            self.resets += 1
        self._publish(survivors + added)

    def _start_newcomers(self, survivors, free):
        """Note [Newcomers start before they are published]: a worker for a new slot is
        started at once but joins a published membership only once it is ready (waiting in
        init() for its assignment, elastic/ready/<worker id>). Publishing it at start would
        stop every member in the next commit's reset for as long as the newcomer takes to
        start (importing torch alone takes seconds); this way the members train on meanwhile."""
        infos = place(survivors + [Worker("%s:%d" % hs, hs[0], hs[1], -1, None) for hs in free])
        now = time.monotonic()
        for (host, slot), info in zip(free, infos[len(survivors):]):
            wid = "%s:%d" % (host, slot)
            self.store.set(keys.ready(wid), b"0")  # not the last one's
            w = self._from_spare(host, slot, wid) or self._spawn(host, slot, info)
            w.started_at = now  # the same for newcomers started together
            self.starting.append(w)

    def _joining(self, now):
        """The started newcomers to publish now: those started together, once all of them are
        ready, or those of them that are once one has waited JOIN_TOGETHER_S for the others
        (after a failure, every one that is ready), a newcomer counting as ready once it has
        had PERSEUS_START_TIMEOUT (the join check then stops it if it does not join)."""
        self._drop_lost_newcomers()
        if not self.starting:
            return []
        for w in self.starting:
            if w.ready_at is None and (now - w.started_at > self.join_timeout
                                       or self.store.get(keys.ready(w.wid)) == b"1"):
                w.ready_at = now
        if self.dirty:  # a failure forces a new membership now anyway
            return [w for w in self.starting if w.ready_at is not None]
        # Newcomers started together join together (one reset for the members, not one
        # each), but those ready wait at most JOIN_TOGETHER_S for the others of their group
        # (a spare still starting, a slower host); groups started at other times neither wait
        # for them nor hold them back.
        together = collections.defaultdict(list)
        for w in self.starting:
            together[w.started_at].append(w)
        joining = []
        for batch in together.values():
            ready = [w for w in batch if w.ready_at is not None]
            if len(ready) == len(batch) or ready and (
                    now - min(w.ready_at for w in ready) >= JOIN_TOGETHER_S):
                joining += ready
        return joining

    def _drop_lost_newcomers(self):
        """A newcomer that failed before it was ready is blacklisted as a member would be; one
        whose slot discovery no longer lists, or whose host is blacklisted, is stopped."""
        for w in self.starting:
            if w.code not in (None, 0) and not w.removed:
                _log("worker %s %s before it joined" % (w.wid, describe_exit(w.code)))
                self._blacklist_failed(w)
            elif w.alive() and self.hosts.get(w.host, 0) <= w.slot:
                _log("host slot %s is no longer listed by %s; stopping its new worker"
                     % (w.wid, self.discovery.describe()))
                self._kill(w, signal.SIGTERM)
                w.removed = True
            elif w.alive() and self.blacklist.contains(w.host):
                _log("host %s is blacklisted; stopping its new worker %s" % (w.host, w.wid))
                self._kill(w)
                w.removed = True
        self.starting = [w for w in self.starting if w.alive() and not w.removed]

    def _blacklist_note(self):
        listed = self.blacklist.listed()
        return "; blacklisted: %s" % ", ".join(listed) if listed else ""

    def _check_health(self, now):
        """A failure only a worker saw (a cut link, a hung peer), and members that never joined
        the current epoch within the start timeout (they are stopped)."""
        if self.dirty or not self.members:
            return
        if self.store.add(keys.failed(self.epoch), 0) > 0:
            _log("epoch %d: a worker reported a failed collective" % self.epoch)
            self._stop_unresponsive()
            self.dirty = True
        if now - self.published_at > self.join_timeout:
            for w in self.members:
                if w.alive() and self.store.get(keys.joined(self.epoch, w.wid)) is None:
                    _log("worker %s did not join epoch %d within %.0f s "
                         "(PERSEUS_START_TIMEOUT); stopping it"
                         % (w.wid, self.epoch, self.join_timeout))
                    self._kill(w)
                    self.published_at = now  # check the others again a timeout later

    def _stop_stopped(self, now):
        """Members whose process has been stopped (SIGSTOP: the driver reads the local ones'
        state) for longer than PERSEUS_TIMEOUT are hung as surely as those their peers time
        out on, also where no peer waits in a collective that times out: the members of a new
        epoch wait for each other in its rendezvous for up to PERSEUS_START_TIMEOUT. They are
        killed and treated as failed (where peers time out on one too, their report may name
        it first: _stop_unresponsive kills it then, with no grace)."""
        for w in self.members:
            if not w.alive() or not hostmod.is_local(w.host) or not w.proc.stopped():
                w.stopped_since = None
                continue
            if w.stopped_since is None:
                w.stopped_since = now
            elif now - w.stopped_since >= self.timeout_s:
                _log("worker %s (rank %d of epoch %d) has been stopped (SIGSTOP) for longer "
                     "than PERSEUS_TIMEOUT (%.0f s); stopping it for good"
                     % (w.wid, self.members.index(w), self.epoch, self.timeout_s))
                self._kill(w)
                w.stopped_since = None

    def _stop_unresponsive(self):
        """Members that their peers' collectives timed out on (PERSEUS_TIMEOUT) and that do not
        report the failure themselves within UNRESPONSIVE_GRACE_S are hung (stopped, blocked):
        they are killed, so that the next membership forms without them instead of waiting
        for them in its rendezvous (a failed member's rules then apply: its slot is
        blacklisted). A named member whose process is stopped (SIGSTOP) cannot report
        anything: it gets no grace."""
        epoch = self.epoch
        named = [w for rank, w in enumerate(self.members)
                 if w.alive() and self.store.add(keys.unresponsive(epoch, rank), 0) > 0]
        deadline = time.monotonic() + UNRESPONSIVE_GRACE_S
        while named:
            named = [w for w in named if w.proc.poll() is None
                     and self.store.get(keys.failed_by(epoch, w.wid)) is None]
            if not named or time.monotonic() > deadline or all(
                    hostmod.is_local(w.host) and w.proc.stopped() for w in named):
                break
            time.sleep(LOOP_INTERVAL_S)
        for w in named:
            _log("worker %s (rank %d of epoch %d) did not respond for PERSEUS_TIMEOUT, as its "
                 "peers reported, and reported nothing itself; stopping it"
                 % (w.wid, self.members.index(w), epoch))
            self._kill(w)
        for w in named:
            try:
                w.proc.popen.wait(timeout=KILL_GRACE_S)
            except Exception:  # noqa: BLE001 (reaped by a later loop then)
                pass
        if named:
            self._reap()

    def _drop_removed_hosts(self):
        """Workers on hosts that discovery no longer lists are stopped (not blacklisted)."""
        for w in self.members:
            if w.alive() and not w.removed and self.hosts.get(w.host, 0) <= w.slot:
                _log("host slot %s is no longer listed by %s; stopping its worker"
                     % (w.wid, self.discovery.describe()))
                self._kill(w, signal.SIGTERM)
                w.removed = True

    def _finish_status(self, now):
        """None while members are still running; the exit status once all have ended."""
        running = [w for w in self.members if w.alive()]
        if running and now - self.finishing_since < FINISH_GRACE_S:
            return None
        if running:
            raise ElasticError("a worker finished but %s did not end within %.0f s"
                               % (", ".join(w.wid for w in running), FINISH_GRACE_S))
        failed = [w for w in self.members if w.code != 0]
        if failed:
            w = failed[0]
            _log("worker %s %s after another had finished" % (w.wid, describe_exit(w.code)))
            return exit_status(w.code)
        return 0

    def run(self):
        """Runs the job; returns perseusrun's exit status."""
        start = time.monotonic()
        while True:
            now = time.monotonic()
            self._discover(now)
            self._reap()
            if self.finishing_since is not None:
                status = self._finish_status(now)
                if status is not None:
                    return status
            elif not self.epoch:
                if len(self._free_slots()) >= self.min_np:
                    self._next_membership(now)
                elif now - start > self.elastic_timeout:
                    raise ElasticError(
                        "timed out after %.0f s (--elastic-timeout) waiting for %d slots "
                        "(--min-np) from %s; found %d" % (
                            self.elastic_timeout, self.min_np, self.discovery.describe(),
                            len(self._free_slots())))
            else:
                self._drop_removed_hosts()
                self._stop_stopped(now)
                self._check_health(now)
                self._next_membership(now)
                # A newcomer past PERSEUS_START_TIMEOUT counts as ready (_joining): a hung
                # one holds the spares back no longer than that.
                self.spares.keep(self.hosts, self.blacklist, newcomer_starting=any(
                    w.ready_at is None for w in self.starting))
            time.sleep(LOOP_INTERVAL_S)

    def stop(self):
        """Ends every worker: the stop key (for those waiting for a membership), SIGTERM, then
        SIGKILL; drains their output."""
        try:
            self.store.set(keys.STOP, b"1")
        except Exception:  # noqa: BLE001 (the store is going away anyway)
            pass
        every = self.workers + self.spares.processes()
        alive = [w for w in every if w.proc.poll() is None]
        for w in alive:
            w.proc.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in alive):
            time.sleep(0.05)
        for w in every:
            w.proc.signal_group(signal.SIGKILL)
        for w in every:
            try:
                w.proc.popen.wait(timeout=5)
            except Exception:  # noqa: BLE001
                pass
            w.proc.finish()
