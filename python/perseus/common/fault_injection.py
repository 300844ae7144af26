"""A test-only hook: makes this process exit at a named phase of elastic training, so that a
fault can be aimed at the moments where a membership change is fragile (bench/chaos/ and
tests/python/elastic/ use it). Off unless PERSEUS_TEST_EXIT_AT is set.

  PERSEUS_TEST_EXIT_AT=<phase>[:<probability>]   the probability defaults to 1
  PERSEUS_TEST_EXIT_RECORD=<file>                a line "<phase> <worker> <unix time>" is
                                                 appended there just before the exit

The setting is read at every call, not once, so a test can arm a running worker (by setting
the variable from inside it). The exit is os._exit(EXIT_CODE): no clean-up, no flush of the
core, as abrupt as a crash, and non-zero so that perseusrun treats it as a failure.

Phases (where exit_at() is called):
  negotiation  host_updates_pending(), before its allreduce: the others negotiate a collective
               this rank never submits;
  broadcast    the state sync after a reset, once the ranks agreed to sync and before the
               broadcast: the others are inside it;
  commit       State.commit(), after save() and before the host-update check;
  join         State.check_host_updates() when a new membership is announced (a worker is
               joining or leaving): the next membership loses a member while it starts;
  allreduce    called by the caller between submitting an asynchronous allreduce and waiting
               for it (bench/chaos/worker.py: the middle of a large allreduce).
"""

import os
import random
import time

PHASES = ("negotiation", "broadcast", "commit", "join", "allreduce")
EXIT_CODE = 86
_VARIABLE = "PERSEUS_TEST_EXIT_AT"


def armed_phase():
    """(phase, probability) from PERSEUS_TEST_EXIT_AT, or None when it is not set. A phase
    that is not in PHASES is an error, so that a misspelt setting cannot silently test
    nothing."""
    value = os.environ.get(_VARIABLE)
    if not value:
        return None
    phase, _, prob = value.partition(":")
    if phase not in PHASES:
        raise ValueError("%s=%s: the phase must be one of %s" % (_VARIABLE, value,
                                                                 ", ".join(PHASES)))
    return phase, float(prob) if prob else 1.0


def exit_at(phase):
    """Exits the process when PERSEUS_TEST_EXIT_AT names `phase` (with its probability)."""
    armed = armed_phase()
    if armed is None or armed[0] != phase or random.random() >= armed[1]:
        return
    record = os.environ.get("PERSEUS_TEST_EXIT_RECORD")
    if record:
        with open(record, "a") as f:
            f.write("%s %s %.6f\n" % (phase, os.environ.get("PERSEUS_ELASTIC_WORKER_ID",
                                                            "rank" + os.environ.get(
                                                                "PERSEUS_RANK", "?")),
                                       time.time()))
    os._exit(EXIT_CODE)
