"""The environment every rank gets: the caller's (filtered), tuning flags, the topology and
the rendezvous address and secret."""

import os

from perseus.rendezvous.topology import rank_env  # noqa: F401  (envmod.rank_env)

# Never forwarded: per-session shell state, and (as in Horovod 0.28) CUDA_VISIBLE_DEVICES,
# which is per-host. PERSEUS_SECRET is set per job, not inherited.
_SKIP_EXACT = {"OLDPWD", "PWD", "SHLVL", "_", "HOSTNAME", "HOME", "USER", "LOGNAME", "SHELL",
               "TERM", "DISPLAY", "PS1", "MAIL", "PERSEUS_SECRET", "SSH_AUTH_SOCK",
               "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY"}
_SKIP_PREFIXES = ("BASH_FUNC_",)
_SKIP_SUFFIXES = ("CUDA_VISIBLE_DEVICES",)
_TOPOLOGY_KEYS = tuple(p + k for p in ("PERSEUS_", "HOROVOD_")
                       for k in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK",
                                 "CROSS_SIZE", "HOSTNAME")) + ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                           "LOCAL_WORLD_SIZE")


def forwardable(environ):
    """The variables sent to remote ranks (local ranks inherit everything)."""
    return {k: v for k, v in environ.items()
            if k not in _SKIP_EXACT and not k.startswith(_SKIP_PREFIXES)
            and not k.endswith(_SKIP_SUFFIXES) and "\0" not in v}


def tuning_env(args):
    """PERSEUS_* variables from the tuning flags that were given."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["PERSEUS_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    pairs = [("PERSEUS_CACHE_CAPACITY", args.cache_capacity),
             ("PERSEUS_HIERARCHICAL_ALLREDUCE", args.hierarchical),
             ("PERSEUS_BIND_TO", args.bind_to),
             ("PERSEUS_TIMELINE", args.timeline_filename),
             ("PERSEUS_LOG_LEVEL", args.log_level),
             ("PERSEUS_START_TIMEOUT", args.start_timeout),
             ("PERSEUS_TIMEOUT", args.timeout),
             ("PERSEUS_IFACE", args.network_interface),
             ("PERSEUS_STALL_WARNING", args.stall_check_warning_time_seconds),
             ("PERSEUS_STALL_SHUTDOWN", args.stall_check_shutdown_time_seconds)]
    for key, value in pairs:
        if value is not None:
            env[key] = str(value)
    # horovodrun's flags with a Perseus meaning (runner/horovod_flags.py).
    if args.num_nccl_streams is not None:
        env["PERSEUS_NUM_STREAMS"] = str(args.num_nccl_streams)
    if args.gloo_timeout_seconds is not None and args.timeout is None:
        env["PERSEUS_TIMEOUT"] = str(args.gloo_timeout_seconds)
    if args.timeline_mark_cycles is not None:
        env["PERSEUS_TIMELINE_MARK_CYCLES"] = "1" if args.timeline_mark_cycles else "0"
    if args.stall_check is False and args.stall_check_warning_time_seconds is None:
        env["PERSEUS_STALL_WARNING"] = "1e9"  # no stall warnings
        env["PERSEUS_STALL_DIAGNOSIS"] = "0"  # nor the early diagnosis
    if args.tcp:
        env["PERSEUS_CPU_OPERATIONS"] = "tcp"
    return env


def _usable_cpus():
    """The CPUs this process may run on (taskset, a cgroup's cpuset), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def job_env(base, args, max_local_size):
    """Variables shared by every rank: the caller's environment with the tuning flags, and
    thread defaults that stop N ranks from each spawning one thread per core."""
    env = dict(base)
    for key in _TOPOLOGY_KEYS:  # a perseusrun inside a rank must not inherit its parent's
        env.pop(key, None)
    env.update(tuning_env(args))
    env.setdefault("OMP_NUM_THREADS", str(max(1, _usable_cpus() // max_local_size)))
    # Ranks bind to their share of the cores, as mpirun's do (Note [Binding ranks to cores]).
    env.setdefault("PERSEUS_BIND_TO", "core")
    # MXNet's operator tuning spawns threads and slows start-up; harmless for other jobs.
    env.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
    env.setdefault("MXNET_USE_NUM_CORES_OPERATOR_TUNING", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def torch_env(rank0_host, rank0_is_local, environ):
    """MASTER_ADDR/MASTER_PORT for torch.distributed's env:// rendezvous (rank 0 hosts torch's
    store there), unless the caller set them: rank 0's host, and a port free on it when it is
    this host (torch's default 29500 otherwise). Inside a rank of another job (a nested
    perseusrun) the values it inherited are that job's, not the caller's."""
    if "PERSEUS_RANK" in environ:
        environ = {}
    addr = environ.get("MASTER_ADDR") or rank0_host
    port = environ.get("MASTER_PORT")
    if not port:
        port = "29500"
        if rank0_is_local:
            import socket
            with socket.socket() as s:
                s.bind(("", 0))
                port = str(s.getsockname()[1])
    return {"MASTER_ADDR": addr, "MASTER_PORT": port}
