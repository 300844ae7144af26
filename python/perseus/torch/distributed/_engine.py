"""Starting and stopping the Perseus engine for torch.distributed.

Note [Engine rendezvous]: the engine is one per process and forms the whole job once, when the
default process group is created (or the first perseus group, if the default group uses another
backend); every later group is a process set of it. How the ranks find each other:
- perseusrun (PERSEUS_CONTROLLER_ADDR is set): the launcher's authenticated store, as for
  hvd.init(); torch's store is not used.
- anything else (torchrun, env://, tcp://, store=, perseus://): through torch's store. Rank 0
  starts a Perseus store server with a fresh secret and publishes its address and secret under
  a key of torch's store; the others read it. The job is then as private as torch's store is
  (which is what Gloo and NCCL rely on too).
The engine's timeouts follow the group's: a lost peer (PERSEUS_TIMEOUT) and a collective some
rank never calls (PERSEUS_STALL_SHUTDOWN) end every rank's pending work with an error, unless
those variables are set."""

import contextlib
import datetime
import itertools
import os
import secrets
import socket

from perseus.common import basics

_KEY = "perseus/engine/%d"
_starts = itertools.count()
_server = None   # rank 0's store server while the engine it served runs
_owned = False   # whether torch.distributed started the engine (and so stops it)
_job = 0         # which of this process's jobs the engine runs (shrink_group forms new ones)


@contextlib.contextmanager
def _environment(values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def seconds(timeout, default_s):
    """A timeout's seconds: a positive timedelta's, else default_s (none given)."""
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
        return timeout.total_seconds()
    return default_s


def options_seconds(opts, default_s):
    """The timeout of a group's options (torch's releases name it _timeout or timeout)."""
    return seconds(getattr(opts, "_timeout", None) or getattr(opts, "timeout", None), default_s)


def _timeout_env(timeout_s):
    env = {}
    if "PERSEUS_STALL_SHUTDOWN" not in os.environ:
        env["PERSEUS_STALL_SHUTDOWN"] = "%g" % timeout_s
        if "PERSEUS_STALL_WARNING" not in os.environ:
            env["PERSEUS_STALL_WARNING"] = "%g" % min(60.0, max(1.0, timeout_s / 2))
    if "PERSEUS_TIMEOUT" not in os.environ and timeout_s < 30:
        env["PERSEUS_TIMEOUT"] = "%g" % max(1.0, timeout_s)
    return env


def _store_host(store):
    """The address other ranks reach rank 0 by: MASTER_ADDR if set (rank 0's host by torch's
    definition), else the host of torch's TCPStore, else this host's name."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    s = store
    for _ in range(8):  # PrefixStore -> ... -> TCPStore
        inner = getattr(s, "underlying_store", None)
        if inner is None:
            break
        s = inner
    host = getattr(s, "host", None)
    if host and host not in ("0.0.0.0", "::"):
        return host
    return socket.gethostname()


def _rendezvous_through(store, rank, size, timeout_s, n, host=None):
    """PERSEUS_* variables that join this process to rank 0's store server (Note [Engine
    rendezvous]); `host`: the address others reach rank 0 by, if not torch's (_store_host)."""
    global _server
    key = _KEY % n
    if rank == 0:
        secret = secrets.token_hex(32)
        _server = basics.core().StoreServer("0.0.0.0", 0, secret)
        store.set(key, "%s %d %s" % (host or _store_host(store), _server.port, secret))
    else:
        store.wait([key])
    host, port, secret = store.get(key).decode().split(" ")
    return {"PERSEUS_RANK": str(rank), "PERSEUS_SIZE": str(size),
            "PERSEUS_CONTROLLER_ADDR": host, "PERSEUS_CONTROLLER_PORT": port,
            "PERSEUS_SECRET": secret}


def _launcher_store_env(n):
    """The n-th job this process forms on its launcher's store (perseusrun's) keeps keys of its
    own: a store's rank keys are claimed once."""
    if n == 0 or not os.environ.get("PERSEUS_CONTROLLER_ADDR"):
        return {}
    return {"PERSEUS_STORE_PREFIX": "%storch%d/" % (os.environ.get("PERSEUS_STORE_PREFIX", ""), n)}


def start(store, rank, size, timeout_s):
    """Forms the job of `size` ranks (this one `rank`) unless the engine runs already; checks
    that the engine's job is torch's world."""
    global _owned, _job
    c = basics.core()
    if not c.is_initialized():
        n = _job = next(_starts)
        env = _timeout_env(timeout_s)
        if os.environ.get("PERSEUS_CONTROLLER_ADDR"):
            env.update(_launcher_store_env(n))
        else:
            env.update(_rendezvous_through(store, rank, size, timeout_s, n))
        with _environment(env):
            basics.init()
        _owned = True
    topo = basics.topology()
    if (topo["rank"], topo["size"]) != (rank, size):
        raise ValueError(
            "perseus: torch.distributed's world is rank %d of %d but the Perseus engine of this "
            "process runs as rank %d of %d; start the job with one launcher and let "
            "init_process_group('perseus') set Perseus up (do not call hvd.init() with other "
            "ranks first)" % (rank, size, topo["rank"], topo["size"]))


def start_from_launcher(timeout_s):
    """Forms the job through Perseus's launcher detection (init_method="perseus://")."""
    global _owned, _job
    if not basics.is_initialized():
        env = _timeout_env(timeout_s)
        _job = next(_starts)
        env.update(_launcher_store_env(_job))
        with _environment(env):
            basics.init()
        _owned = True


def _launcher_shrink_env(rank, size, n):
    """The launcher's variables for the n-th job of this process, of `size` ranks: perseusrun
    gave those of the first. Local and cross ranks are derived from the host names again."""
    env = {"PERSEUS_RANK": str(rank), "PERSEUS_SIZE": str(size)}
    env.update({"PERSEUS_%s_%s" % (k, v): "" for k in ("LOCAL", "CROSS") for v in ("RANK", "SIZE")})
    if os.environ.get("PERSEUS_JOB_ID"):  # names the job's shared memory, which is new
        env["PERSEUS_JOB_ID"] = "%s-s%d" % (os.environ["PERSEUS_JOB_ID"], n)
    # Keys of its own, whichever way the first job formed (hvd.init() takes no prefix).
    env["PERSEUS_STORE_PREFIX"] = "%sshrink%d/" % (os.environ.get("PERSEUS_STORE_PREFIX", ""), n)
    return env


def restart(store, rank, size, timeout_s, host=None):
    """Shrink (Note [Shrinking] in _shrink.py): stops this process's engine at once, without
    the barrier of stop() (the ranks left out may be dead, or may never call it), and forms a
    new job of `size` ranks, this one `rank`, through the store the first job used: torch's (a
    key of its own; `host`: rank 0's address if torch's store does not name it) or
    perseusrun's (a prefix of its own)."""
    global _owned, _server, _job
    basics.shutdown()
    if _server is not None:
        _server.stop()
        _server = None
    n = _job = next(_starts)
    env = _timeout_env(timeout_s)
    if os.environ.get("PERSEUS_CONTROLLER_ADDR"):
        env.update(_launcher_shrink_env(rank, size, n))
    else:
        env.update(_rendezvous_through(store, rank, size, timeout_s, n, host))
    with _environment(env):
        basics.init()
    _owned = True


def job():
    """The job the engine runs now: a default group stops the engine only if it is its own."""
    return _job


def stop(timeout_s):
    """Stops the engine if torch.distributed started it. Every rank calls
    destroy_process_group(), but not at once: the barrier keeps a rank that is done from
    ending the collectives that others still run on their groups."""
    global _owned, _server
    if _owned:
        _owned = False
        try:
            basics.core().barrier(0).wait(timeout_s)
        except Exception:  # noqa: BLE001 (a job that already failed still shuts down)
            pass
        basics.shutdown()
    if _server is not None:
        _server.stop()
        _server = None
