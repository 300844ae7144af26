"""Horovod's HOROVOD_* tuning variables, and a check of the PERSEUS_* ones, applied by init().

A job script written for Horovod keeps its environment: every variable Horovod documents is
either translated to the PERSEUS_* setting with the same meaning (unless that one is set too,
which wins) or reported once, on rank 0, as having no effect here with the reason. A PERSEUS_*
variable that Perseus does not know (a typo) is reported with the closest known name.

The core already reads some Horovod names itself (src/common/params.cc: fusion threshold,
timeline, log level, stall check, hierarchical allreduce, cache capacity); those are listed
here too so that the conformance table (docs/horovod-compatibility.md) has one source.
"""

import difflib
import os
import sys


def _seconds(v):
    return str(float(v))


def _log_level(v):
    v = v.strip().lower()
    return "error" if v == "fatal" else v


def _cpu_operations(v):
    v = v.strip().lower()
    return {"mpi": "mpi", "gloo": "tcp", "ccl": "auto"}.get(v, v)


def _stall_disable(v):
    # Horovod: HOROVOD_STALL_CHECK_DISABLE=1 turns the stall inspector off.
    return "1e9" if v.strip().lower() in ("1", "true", "yes", "on") else None


# HOROVOD_* -> (PERSEUS_* it sets, value translation or None, what it means).
TRANSLATED = {
    "HOROVOD_FUSION_THRESHOLD": ("PERSEUS_FUSION_THRESHOLD", None, "fusion buffer bytes"),
    "HOROVOD_CACHE_CAPACITY": ("PERSEUS_CACHE_CAPACITY", None, "response cache entries"),
    "HOROVOD_TIMELINE": ("PERSEUS_TIMELINE", None,
                         "timeline path (one file per rank); DYNAMIC arms start_timeline()"),
    "HOROVOD_TIMELINE_MARK_CYCLES": ("PERSEUS_TIMELINE_MARK_CYCLES", None,
                                     "one CYCLE span per engine cycle"),
    "HOROVOD_LOG_LEVEL": ("PERSEUS_LOG_LEVEL", _log_level, "core log level (FATAL -> error)"),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("PERSEUS_STALL_WARNING", _seconds,
                                         "seconds before a stall warning"),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("PERSEUS_STALL_SHUTDOWN", _seconds,
                                            "seconds before a stall stops the job"),
    "HOROVOD_STALL_CHECK_DISABLE": ("PERSEUS_STALL_WARNING", _stall_disable,
                                    "no stall warnings"),
    "HOROVOD_HIERARCHICAL_ALLREDUCE": ("PERSEUS_HIERARCHICAL_ALLREDUCE", None,
                                       "hierarchical allreduce"),
    "HOROVOD_NUM_NCCL_STREAMS": ("PERSEUS_NUM_STREAMS", None, "CUDA streams per device"),
    "HOROVOD_GLOO_TIMEOUT_SECONDS": ("PERSEUS_TIMEOUT", _seconds,
                                     "seconds before a lost peer or stuck transfer fails"),
    "HOROVOD_START_TIMEOUT": ("PERSEUS_START_TIMEOUT", _seconds,
                              "seconds rendezvous waits for every rank"),
    "HOROVOD_GLOO_IFACE": ("PERSEUS_IFACE", None, "network interface"),
    "HOROVOD_CPU_OPERATIONS": ("PERSEUS_CPU_OPERATIONS", _cpu_operations,
                               "CPU data plane: MPI -> mpi, GLOO -> tcp (Perseus's own TCP "
                               "plane stands in for Gloo), CCL -> auto"),
    # AIACC-Training's own spelling (its demo scripts).
    "PERSEUS_ALLREDUCE_STREAMS": ("PERSEUS_NUM_STREAMS", None, "CUDA streams per device"),
}

# HOROVOD_* that Perseus accepts and does not need, with the reason.
NO_EFFECT = {
    "HOROVOD_CYCLE_TIME": "the engine runs a cycle as soon as work arrives, not on a timer",
    "HOROVOD_AUTOTUNE": "there is no autotuner; the allreduce algorithm is picked per message "
                        "by a cost model (PERSEUS_ALLREDUCE_ALGO forces one)",
    "HOROVOD_AUTOTUNE_LOG": "there is no autotuner",
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "there is no autotuner",
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "there is no autotuner",
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "there is no autotuner",
    "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "there is no autotuner",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "allgather within a host already runs in shared memory",
    "HOROVOD_TORUS_ALLREDUCE": "no torus allreduce; PERSEUS_HIERARCHICAL_ALLREDUCE is the "
                               "two-level one",
    "HOROVOD_CONTROLLER": "the control plane is always Perseus's own TCP controller",
    "HOROVOD_MPI_THREADS_DISABLE": "Perseus never asks MPI for MPI_THREAD_MULTIPLE",
    "HOROVOD_THREAD_AFFINITY": "rank threads are bound by PERSEUS_BIND_TO (perseusrun "
                               "--bind-to)",
    "HOROVOD_BATCH_D2D_MEMCOPIES": "fusion copies are always batched",
    "HOROVOD_DISABLE_GROUP_FUSION": "groups are fused within the group only already",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "GPU completion is always asynchronous",
    "HOROVOD_DYNAMIC_PROCESS_SETS": "process sets can always be added and removed",
    "HOROVOD_LOG_HIDE_TIME": "the core's log lines carry no timestamp to hide",
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": "Adasum is not supported",
    "HOROVOD_DISABLE_NVTX_RANGES": "Perseus emits no NVTX ranges",
    # AIACC-Training variables of its demo scripts.
    "PERSEUS_ALLREDUCE_MODE": "the allreduce algorithm is picked per message by a cost model "
                              "(PERSEUS_ALLREDUCE_ALGO forces one)",
    "PERSEUS_ALLREDUCE_DISABLE_STREAM_TUNING": "streams are not tuned at run time "
                                               "(PERSEUS_NUM_STREAMS)",
    "PERSEUS_ALLREDUCE_FUSION": "the fusion buffer is PERSEUS_FUSION_THRESHOLD (bytes)",
}

# Set by horovodrun or perseusrun for the ranks, read by programs (and by the core, which
# joins a horovodrun job through its rendezvous server: src/rendezvous/horovodrun_store.cc);
# never a tuning knob.
TOPOLOGY = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
            "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
            "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
            "HOROVOD_ELASTIC")  # 1 for the workers of an elastic job, as horovodrun sets it

# horovodrun (Gloo mode) sets these for every worker to select its own Gloo controller and CPU
# operations, whatever the user asked: under it they describe the launcher, not a choice, and
# are neither translated (Gloo's CPU operations would force TCP within a host) nor reported.
LAUNCHER_SET = ("HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")


def started_by_horovodrun(environ):
    return bool(environ.get("HOROVOD_RANK") and environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"))

# PERSEUS_* read outside the core's parameter table (launcher, bootstrap, tests).
OTHER_PERSEUS = ("PERSEUS_RANK", "PERSEUS_SIZE", "PERSEUS_LOCAL_RANK", "PERSEUS_LOCAL_SIZE",
                 "PERSEUS_CROSS_RANK", "PERSEUS_CROSS_SIZE", "PERSEUS_HOSTNAME",
                 "PERSEUS_CONTROLLER_ADDR", "PERSEUS_CONTROLLER_PORT", "PERSEUS_SECRET",
                 "PERSEUS_JOB_ID", "PERSEUS_BUILD_DIR",
                 # perseusrun's elastic mode (perseus/common/elastic/worker.py)
                 "PERSEUS_ELASTIC", "PERSEUS_ELASTIC_WORKER_ID", "PERSEUS_ELASTIC_JOB_ID",
                 "PERSEUS_ELASTIC_TIMEOUT", "PERSEUS_ELASTIC_FIRST_EPOCH",
                 # the test-only exit hook (perseus/common/fault_injection.py)
                 "PERSEUS_TEST_EXIT_AT", "PERSEUS_TEST_EXIT_RECORD")


def translate(environ):
    """The PERSEUS_* values the HOROVOD_* variables in `environ` stand for (unset PERSEUS_*
    ones only), and the list of (variable, reason) that have no effect."""
    updates, ignored = {}, []
    skip = LAUNCHER_SET if started_by_horovodrun(environ) else ()
    for hvd_name, (perseus_name, convert, _) in TRANSLATED.items():
        value = environ.get(hvd_name)
        if not value or hvd_name in skip or environ.get(perseus_name) or perseus_name in updates:
            continue
        value = convert(value) if convert else value
        if value is not None:
            updates[perseus_name] = value
    for hvd_name, reason in NO_EFFECT.items():
        if environ.get(hvd_name) and hvd_name not in skip:
            ignored.append((hvd_name, reason))
    return updates, ignored


def unknown_perseus(environ, known):
    """(variable, closest known name or None) for each PERSEUS_* variable nobody reads."""
    known = set(known) | set(OTHER_PERSEUS) | set(TRANSLATED) | set(NO_EFFECT)
    out = []
    for name in sorted(environ):
        if name.startswith("PERSEUS_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            out.append((name, close[0] if close else None))
    return out


def apply_before_init():
    """Exports the translated variables into os.environ (the core reads them at init) and
    returns the no-effect list, to report once the rank is known."""
    updates, ignored = translate(os.environ)
    os.environ.update(updates)
    return ignored


def report(ignored, known, rank):
    """Rank 0 prints one line per no-effect HOROVOD_* and unknown PERSEUS_* variable."""
    if rank != 0:
        return
    for name, reason in ignored:
        print("perseus: %s=%s has no effect in Perseus: %s" % (name, os.environ[name], reason),
              file=sys.stderr, flush=True)
    for name, close in unknown_perseus(os.environ, known):
        hint = "; did you mean %s?" % close if close else ""
        print("perseus: warning: %s is not a Perseus variable and is ignored%s" % (name, hint),
              file=sys.stderr, flush=True)
