"""horovodrun's flags that perseusrun takes so that a Horovod launch line runs unchanged, and
horovodrun's --config-file (YAML). Each flag either sets the PERSEUS_* variable with the same
meaning (env.py) or is reported as having no effect here, with the reason; what Perseus cannot
do at all (jsrun) stops with an error saying so. The elastic flags start elastic mode."""


def _on_off(group, name, dest, help_on, help_off=None):
    """--NAME / --no-NAME, default None (not given), as horovodrun's override flags."""
    g = group.add_mutually_exclusive_group()
    g.add_argument("--" + name, dest=dest, action="store_const", const=True, default=None,
                   help=help_on)
    g.add_argument("--no-" + name, dest=dest, action="store_const", const=False,
                   help=help_off or "Turn %s off." % name)


def add_arguments(p):
    h = p.add_argument_group("horovodrun flags (accepted as horovodrun takes them)")
    h.add_argument("--config-file", help="horovodrun's YAML configuration file; flags given "
                                         "on the command line take precedence.")
    h.add_argument("--tcp", action="store_true", default=None,
                   help="TCP only between ranks, no shared memory (PERSEUS_CPU_OPERATIONS=tcp).")
    h.add_argument("--num-nccl-streams", type=int,
                   help="CUDA streams per device (PERSEUS_NUM_STREAMS).")
    h.add_argument("--gloo-timeout-seconds", type=float,
                   help="Seconds before a lost peer or stuck transfer fails the job "
                        "(PERSEUS_TIMEOUT, unless --timeout is given).")
    _on_off(h, "timeline-mark-cycles", "timeline_mark_cycles",
            "Add one CYCLE span per engine cycle to the timeline "
            "(PERSEUS_TIMELINE_MARK_CYCLES).")
    stall = h.add_mutually_exclusive_group()
    stall.add_argument("--no-stall-check", dest="stall_check", action="store_const",
                       const=False, default=None, help="No stall warnings.")
    stall.add_argument("--stall-check", dest="stall_check", action="store_const", const=True,
                       help="Stall warnings on (the default).")
    h.add_argument("--binding-args",
                   help="mpirun binding arguments (appended to --mpi-args with --mpi).")
    # No effect here; each is reported with its reason by resolve().
    h.add_argument("--cycle-time-ms", type=float, help="No effect (see the log line).")
    _on_off(h, "hierarchical-allgather", "hierarchical_allgather", "No effect.")
    _on_off(h, "torus-allreduce", "torus_allreduce", "No effect.")
    _on_off(h, "autotune", "autotune", "No effect: Perseus has no autotuner.")
    h.add_argument("--autotune-log-file", help="No effect.")
    h.add_argument("--autotune-warmup-samples", type=int, help="No effect.")
    h.add_argument("--autotune-steps-per-sample", type=int, help="No effect.")
    h.add_argument("--autotune-bayes-opt-max-samples", type=int, help="No effect.")
    h.add_argument("--autotune-gaussian-process-noise", type=float, help="No effect.")
    _on_off(h, "mpi-threads-disable", "mpi_threads_disable", "No effect.")
    h.add_argument("--thread-affinity", help="No effect: see --bind-to.")
    h.add_argument("--disable-cache", action="store_true", default=None, help="No effect.")
    ts = h.add_mutually_exclusive_group()
    ts.add_argument("--log-with-timestamp", dest="log_timestamp", action="store_const",
                    const=True, default=None, help="No effect.")
    ts.add_argument("--log-without-timestamp", "--log-hide-timestamp", dest="log_timestamp",
                    action="store_const", const=False, help="No effect.")
    h.add_argument("--no-log-hide-timestamp", dest="log_timestamp", action="store_const",
                   const=True, help="No effect.")
    h.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                   dest="prefix_timestamp", action="store_true", default=None, help="No effect.")
    # Elastic mode (runner/elastic/driver.py, docs/elastic.md).
    e = p.add_argument_group("elastic mode (horovodrun's flags; docs/elastic.md)")
    e.add_argument("--min-np", "--min-num-proc", type=int,
                   help="Fewest workers the job runs with; below it perseusrun waits up to "
                        "--elastic-timeout for hosts (default: -np).")
    e.add_argument("--max-np", "--max-num-proc", type=int,
                   help="Most workers the job grows to (default: no limit).")
    e.add_argument("--slots-per-host", type=int,
                   help="Slots of a host that the discovery script prints without ':slots' "
                        "(default 1).")
    e.add_argument("--elastic-timeout", type=int,
                   help="Seconds to wait for --min-np workers before failing (default "
                        "HOROVOD_ELASTIC_TIMEOUT or 600).")
    e.add_argument("--reset-limit", type=int,
                   help="Most membership changes before the job fails (default: no limit).")
    e.add_argument("--host-discovery-script",
                   help="Executable printing the available hosts, one 'host:slots' per line; "
                        "run about once a second.")
    e.add_argument("--spare-workers", type=int,
                   help="Perseus's own: processes of the training script to keep started ahead "
                        "of need on the first host discovery lists: each "
                        "imports and warms up, then waits, and takes over the next slot that "
                        "discovery adds on its host, which then joins in about a second "
                        "instead of after its imports (default 0).")
    e.add_argument("--blacklist-cooldown-range", type=int, nargs=2, metavar=("LO", "HI"),
                   help="Seconds a failed host stays blacklisted: LO the first time, doubling "
                        "(with jitter) up to HI (default: for good).")


_NO_EFFECT = {
    "cycle_time_ms": ("--cycle-time-ms", "the engine runs a cycle as soon as work arrives, "
                                         "not on a timer"),
    "hierarchical_allgather": ("--hierarchical-allgather", "allgather within a host already "
                                                           "runs in shared memory"),
    "torus_allreduce": ("--torus-allreduce", "there is no torus allreduce; "
                                             "--hierarchical-allreduce is the two-level one"),
    "autotune": ("--autotune", "Perseus has no autotuner: the allreduce algorithm is picked per "
                               "message by a cost model"),
    "autotune_log_file": ("--autotune-log-file", "Perseus has no autotuner"),
    "autotune_warmup_samples": ("--autotune-warmup-samples", "Perseus has no autotuner"),
    "autotune_steps_per_sample": ("--autotune-steps-per-sample", "Perseus has no autotuner"),
    "autotune_bayes_opt_max_samples": ("--autotune-bayes-opt-max-samples",
                                       "Perseus has no autotuner"),
    "autotune_gaussian_process_noise": ("--autotune-gaussian-process-noise",
                                        "Perseus has no autotuner"),
    "mpi_threads_disable": ("--mpi-threads-disable", "Perseus never asks MPI for "
                                                     "MPI_THREAD_MULTIPLE"),
    "thread_affinity": ("--thread-affinity", "rank threads are bound by --bind-to"),
    "disable_cache": ("--disable-cache", "perseusrun caches no host checks"),
    "log_timestamp": ("--log-with/without-timestamp", "the core's log lines carry no "
                                                      "timestamp"),
    "prefix_timestamp": ("--prefix-output-with-timestamp", "rank output is prefixed with "
                                                           "[rank]<stream> only"),
}

_ELASTIC = ("min_np", "max_np", "slots_per_host", "elastic_timeout", "reset_limit",
            "host_discovery_script", "blacklist_cooldown_range", "spare_workers")


def _resolve_elastic(parser, args):
    """Elastic mode is on with --min-np, --max-np or --host-discovery-script."""
    args.elastic = any(getattr(args, k, None) is not None
                       for k in ("min_np", "max_np", "host_discovery_script"))
    if not args.elastic:
        return ["--%s has no effect without elastic mode (--min-np, --max-np or "
                "--host-discovery-script)" % k.replace("_", "-")
                for k in _ELASTIC if getattr(args, k, None) is not None]
    if args.mpi:
        parser.error("--mpi: elastic mode starts its workers itself; drop --mpi")
    if args.host_discovery_script and (args.hosts or args.hostfile):
        parser.error("--host-discovery-script and -H/--hostfile both name the hosts; give one")
    if args.np is None:
        args.np = args.min_np or args.max_np
    for name in ("min_np", "max_np", "slots_per_host", "elastic_timeout", "reset_limit",
                 "spare_workers"):
        value = getattr(args, name)
        if value is not None and value < (0 if name in ("reset_limit", "elastic_timeout",
                                                        "spare_workers")
                                          else 1):
            parser.error("--%s must be positive, got %d" % (name.replace("_", "-"), value))
    min_np = args.min_np if args.min_np is not None else args.np
    if args.max_np is not None and min_np is not None and args.max_np < min_np:
        parser.error("--max-np %d is below --min-np %d" % (args.max_np, min_np))
    lo_hi = args.blacklist_cooldown_range
    if lo_hi and not 0 <= lo_hi[0] <= lo_hi[1]:
        parser.error("--blacklist-cooldown-range LO HI needs 0 <= LO <= HI")
    return []


def resolve(parser, args):
    """Checks the horovodrun flags; returns the lines to print for those with no effect."""
    elastic_notes = _resolve_elastic(parser, args)
    if args.jsrun:
        parser.error("--jsrun: LSF's jsrun is not supported; give the hosts with -H/--hostfile")
    if args.log_level == "fatal":
        args.log_level = "error"
    notes = elastic_notes
    if args.binding_args:
        if args.mpi:
            args.mpi_args = ("%s %s" % (args.mpi_args, args.binding_args)).strip()
        else:
            notes.append("--binding-args has no effect without --mpi: ranks bind to cores "
                         "per --bind-to (core by default)")
    for dest, (flag, reason) in _NO_EFFECT.items():
        if getattr(args, dest, None) is not None:  # given (flags default to None)
            notes.append("%s has no effect in Perseus: %s" % (flag, reason))
    return notes


# horovodrun's YAML (horovod/runner/common/util/config_parser.py): section -> key -> dest.
_CONFIG = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "cycle_time_ms",
               "cache_capacity": "cache_capacity",
               "hierarchical_allreduce": "hierarchical",
               "hierarchical_allgather": "hierarchical_allgather"},
    "autotune": {"enabled": "autotune", "log_file": "autotune_log_file",
                 "warmup_samples": "autotune_warmup_samples",
                 "steps_per_sample": "autotune_steps_per_sample",
                 "bayes_opt_max_samples": "autotune_bayes_opt_max_samples",
                 "gaussian_process_noise": "autotune_gaussian_process_noise"},
    "timeline": {"filename": "timeline_filename", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "stall_check",
                    "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "library_options": {"mpi_threads_disable": "mpi_threads_disable",
                        "num_nccl_streams": "num_nccl_streams",
                        "gloo_timeout_seconds": "gloo_timeout_seconds"},
    "logging": {"level": "log_level", "hide_timestamp": "log_timestamp"},
}


def apply_config_file(parser, args, argv):
    """Fills the settings of args.config_file that the command line did not give."""
    try:
        import yaml
    except ImportError:
        parser.error("--config-file needs PyYAML (pip install pyyaml)")
    try:
        with open(args.config_file) as f:
            config = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        parser.error("--config-file %s: %s" % (args.config_file, e))
    if not isinstance(config, dict):
        parser.error("--config-file %s: expected a mapping of sections" % args.config_file)
    for section, values in config.items():
        keys = _CONFIG.get(section)
        if keys is None:
            if section == "elastic":
                parser.error("--config-file %s: the elastic section is not supported (Perseus "
                             "has no elastic mode)" % args.config_file)
            parser.error("--config-file %s: unknown section %r; known: %s"
                         % (args.config_file, section, ", ".join(sorted(_CONFIG))))
        for key, value in (values or {}).items():
            dest = keys.get(key)
            if dest is None:
                parser.error("--config-file %s: unknown key %s.%s" % (args.config_file,
                                                                      section, key))
            if getattr(args, dest, None) is not None:
                continue  # the command line wins, as in horovodrun
            if dest == "hierarchical":
                value = "1" if value else "0"
            elif dest == "log_level":
                value = str(value).lower()
            elif dest == "log_timestamp":
                value = not value  # hide_timestamp
            setattr(args, dest, value)
