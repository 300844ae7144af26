"""perseusrun: the entry point and the job lifecycle (start, watch, tear down)."""

import os
import secrets
import signal
import sys
import time

from perseus.runner import env as envmod
from perseus.runner import hosts as hostmod
from perseus.runner import info
from perseus.runner.args import parse_args
from perseus.runner.guard import Guard
from perseus.runner.process import (LaunchedProcess, OutputSink, describe_exit, exit_status,
                                    killed_by_signal)
from perseus.runner.remote import env_block, mpirun_argv, ssh_argv

# Seconds between SIGTERM and SIGKILL when stopping the job.
KILL_GRACE_S = 3.0
# How long a first failure waits for the exits that may explain it (see Job._root_cause).
FAILURE_SETTLE_S = 1.0
# What a rank's ShutDownError says when another rank shut the job down (src/engine/cycle/cycle.cc).
_PEER_SHUT_DOWN = "Perseus was shut down: rank "
_SHM_DIR = "/dev/shm"
# Each stops the job: SIGHUP is what a closed terminal or ssh session sends.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _log(msg):
    try:
        print("perseusrun: %s" % msg, file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr was a terminal that closed (SIGHUP): stopping the job matters more


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupt(signum, frame):
    raise _Interrupted(signum)


def _shm_names(job_id):
    """This job's shared-memory segments (the ranks name them perseus-<job id>-<rank>, and
    perseus-<job id>-e<epoch>-<rank> in elastic mode), never another job's."""
    try:
        return {n for n in os.listdir(_SHM_DIR) if n.startswith("perseus-%s-" % job_id)}
    except OSError:
        return set()


class Job:
    """The launched processes and the policy: the first rank to fail (non-zero exit or a
    signal) stops all others, SIGTERM then SIGKILL, and its code becomes perseusrun's."""

    def __init__(self, sink, verbose, guard):
        self.sink = sink
        self.verbose = verbose
        self.guard = guard
        self.procs = []
        self.failed = None
        self.failed_at = None
        self.left_early = None  # (process, monotonic time): the first to exit 0 before the rest

    def add(self, proc):
        self.procs.append(proc)

    def wait(self):
        while True:
            codes = [(p, p.poll()) for p in self.procs]
            failed = [(p, code) for p, code in codes if code not in (None, 0)]
            if self.left_early is None and any(code is None for _, code in codes):
                done = [p for p, code in codes if code == 0]
                if done:
                    self.left_early = (done[0], time.monotonic())
            if failed:
                self.failed_at = time.monotonic()
                self.failed = self._root_cause(failed)
                self.stop()
                return
            if all(code is not None for _, code in codes):
                return
            time.sleep(0.05)

    def _root_cause(self, failed):
        """Survivors that saw a peer die exit right after it, sometimes before the dead rank's
        own exit reaches us (a remote rank's comes back through ssh). Wait a moment for the
        others, then name a rank killed by a signal (locally, or 128+N relayed by ssh) first,
        and a rank whose error blames another rank's shutdown last."""
        deadline = time.monotonic() + FAILURE_SETTLE_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
            failed += [(p, p.poll()) for p in self.procs
                       if p.poll() not in (None, 0) and all(p is not q for q, _ in failed)]
            if any(killed_by_signal(code) for _, code in failed):
                break
        by_signal = [p for p, code in failed if killed_by_signal(code)]
        if by_signal:
            return by_signal[0]
        # A rank whose error says another one shut the job down failed because of it.
        causes = [p for p, _ in failed if not any(_PEER_SHUT_DOWN in line for _, line in p.tail)]
        return causes[0] if causes else failed[0][0]

    def stop(self, first_signal=signal.SIGTERM):
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            p.signal_group(first_signal)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in alive):
            time.sleep(0.05)

    def cleanup(self):
        """Kills whatever is left in the ranks' process groups and drains their output."""
        for p in self.procs:
            p.signal_group(signal.SIGKILL)
        for p in self.procs:
            try:
                p.popen.wait(timeout=5)
            except Exception:  # noqa: BLE001 (unkillable: report via poll below)
                pass
            p.finish()

    def report_failure(self):
        p = self.failed
        code = p.poll()
        who = "rank %d on host %s" % (p.rank, p.host) if p.rank is not None else "mpirun"
        _log("%s %s; the other ranks were stopped." % (who, describe_exit(code)))
        if self.left_early is not None and self.left_early[0].rank is not None:
            early, when = self.left_early
            _log("rank %d on host %s had left the job before: it exited with code 0 %.1f s "
                 "earlier while the others were still running, so their pending collectives "
                 "could not complete." % (early.rank, early.host, self.failed_at - when))
        if p.tail:
            _log("last lines of its stderr:")
            for rank, line in p.tail:
                print("    [%d] %s" % (rank, line), file=sys.stderr)
        return exit_status(code)


def _controller_address(slots, args):
    """(bind address, address the ranks connect to) for the rendezvous store."""
    remote = [s.host for s in slots if not hostmod.is_local(s.host)]
    if args.network_interface:
        addr = hostmod.interface_address(args.network_interface)
        return ("0.0.0.0" if remote else addr), addr
    if not remote:
        return "127.0.0.1", "127.0.0.1"
    return "0.0.0.0", hostmod.address_reaching(remote[0])


def _start_store(bind, secret):
    try:
        from perseus import _core
    except ImportError as e:
        raise SystemExit("perseusrun: cannot load perseus._core (%s); reinstall perseus "
                         "with 'pip install .'" % e)
    return _core.StoreServer(bind, 0, secret)


def _launch_ranks(job, slots, args, base_env):
    remote_env = envmod.forwardable(base_env)
    remote_env["PERSEUS_SECRET"] = base_env["PERSEUS_SECRET"]  # travels on ssh's stdin
    for slot in slots:
        rank_env = dict(base_env)
        rank_env.update(envmod.rank_env(slot))
        if hostmod.is_local(slot.host):
            proc = LaunchedProcess(args.command, rank_env, slot.rank, slot.host, job.sink,
                                   guard=job.guard)
        else:
            env = dict(remote_env)
            env.update(envmod.rank_env(slot))
            argv = ssh_argv(slot.host, args.command, args.ssh_port, args.ssh_identity_file)
            proc = LaunchedProcess(argv, None, slot.rank, slot.host, job.sink,
                                   stdin_data=env_block(env), guard=job.guard)
        if args.verbose:
            _log("rank %d: host %s local_rank %d/%d cross_rank %d/%d pid %d"
                 % (slot.rank, slot.host, slot.local_rank, slot.local_size, slot.cross_rank,
                    slot.cross_size, proc.popen.pid))
        job.add(proc)


def _launch_mpi(job, host_list, args, base_env):
    env = dict(base_env)
    if "PYTHONUNBUFFERED" not in os.environ:
        # mpirun tags every chunk it reads, so unbuffered prints would split lines mid-way.
        env.pop("PYTHONUNBUFFERED", None)
    names = [k for k in envmod.forwardable(env) if k.replace("_", "a").isalnum()]
    names.append("PERSEUS_SECRET")
    argv = mpirun_argv(args.command, host_list, args.np, names, args.ssh_port,
                       args.ssh_identity_file, args.mpi_args)
    if args.verbose:
        _log("running: %s" % " ".join(a for a in argv if a != "-x"))
    job.add(LaunchedProcess(argv, env, None, "mpirun", job.sink, guard=job.guard))


def run(args):
    if args.elastic:
        from perseus.runner.elastic.launch import run_elastic
        return run_elastic(args, _start_store, _shm_names, _raise_interrupt, _Interrupted,
                           STOP_SIGNALS)
    allocation = None if args.hostfile or args.hosts else hostmod.slurm_allocation(os.environ)
    if args.hostfile:
        host_list = hostmod.parse_hostfile(args.hostfile)
    elif args.hosts:
        host_list = hostmod.parse_hosts(args.hosts)
    elif allocation:
        # Inside salloc/sbatch: the allocation's nodes and tasks (-np may ask for fewer).
        host_list = allocation
        if args.np is None:
            args.np = sum(h.slots for h in host_list)
        if args.verbose:
            _log("Slurm allocation %s: %s" % (os.environ.get("SLURM_JOB_ID"),
                                              ",".join("%s:%d" % h for h in host_list)))
    else:
        host_list = [hostmod.HostSlots("localhost", args.np)]
    slots = hostmod.assign_slots(host_list, args.np)
    bind, address = _controller_address(slots, args)
    secret = secrets.token_hex(32)
    job_id = secrets.token_hex(8)
    server = _start_store(bind, secret)
    base_env = envmod.job_env(os.environ, args, max(s.local_size for s in slots))
    base_env.update({"PERSEUS_CONTROLLER_ADDR": address,
                     "PERSEUS_CONTROLLER_PORT": str(server.port),
                     "PERSEUS_SECRET": secret,
                     "PERSEUS_JOB_ID": job_id})
    rank0_local = hostmod.is_local(slots[0].host)
    base_env.update(envmod.torch_env(address if rank0_local else slots[0].host, rank0_local,
                                     os.environ))
    if args.verbose:
        _log("%d ranks on %s; rendezvous store at %s:%d"
             % (args.np, ",".join("%s:%d" % h for h in host_list), address, server.port))

    job = Job(OutputSink(args.output_filename), args.verbose, Guard())
    previous = {s: signal.signal(s, _raise_interrupt) for s in STOP_SIGNALS}
    try:
        if args.mpi:
            _launch_mpi(job, host_list, args, base_env)
        else:
            _launch_ranks(job, slots, args, base_env)
        job.wait()
        status = job.report_failure() if job.failed else 0
    except _Interrupted as e:
        # Block further signals while stopping: a second Ctrl-C must not skip the cleanup.
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        _log("received %s; stopping all ranks." % signal.Signals(e.signum).name)
        job.stop()
        status = 128 + e.signum
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        job.cleanup()
        job.guard.close()
        job.sink.close()
        server.stop()
        for name in _shm_names(job_id):  # left by ranks killed during start-up
            try:
                os.unlink(os.path.join(_SHM_DIR, name))
            except OSError:
                pass
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check_build:
        return info.check_build()
    if args.params:
        return info.print_params()
    try:
        return run(args)
    except (ValueError, OSError) as e:
        _log(str(e))
        return 2
