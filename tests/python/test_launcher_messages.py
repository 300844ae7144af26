"""perseusrun's messages about hosts and repeated failures: an unresolvable host is named,
an elastic job leaves it out while the others meet --min-np, hostfile syntax from a discovery
script is understood, and a warning that repeats is printed a few times and then counted."""

import os
import stat
import sys

import pytest

from perseus_test_support import perseusrun
from perseus.runner import hosts as hostmod
from perseus.runner.discovery import parse_discovery_output
from perseus.runner.wording import Throttle

pytestmark = pytest.mark.timeout(120)
PY = sys.executable
NOWHERE = "no-such-host.invalid"  # RFC 2606: never resolves


def test_discovery_lines_in_hostfile_syntax():
    text = "node7 slots=2\nnode8:3\nnode9  # comment\n"
    assert parse_discovery_output(text, 1) == {"node7": 2, "node8": 3, "node9": 1}
    with pytest.raises(RuntimeError, match="'node7 slot=2' is not 'host:slots', 'host slots=N'"):
        parse_discovery_output("node7 slot=2\n", 1)


def test_throttle_prints_a_few_then_counts():
    lines, now = [], [0.0]
    say = Throttle(lines.append, burst=3, window_s=60, clock=lambda: now[0])
    for i in range(10):
        say("script failed %d" % i)
    now[0] = 61.0
    say("script failed again")
    assert lines == ["script failed 0", "script failed 1", "script failed 2",
                     "script failed again (and 7 more like it in the last 61 s)"]


def test_unresolvable_host_is_named():
    with pytest.raises(ValueError, match="cannot resolve host %s" % NOWHERE):
        hostmod.check_resolvable(["localhost", NOWHERE])
    r = perseusrun(["-np", 2, "-H", "localhost:1,%s:1" % NOWHERE, PY, "-c", "pass"])
    assert r.returncode == 2 and "cannot resolve host %s" % NOWHERE in r.stderr, r.stderr


def test_elastic_job_leaves_out_an_unresolvable_host(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\necho %s:1\n" % NOWHERE)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    r = perseusrun(["-np", 2, "--min-np", 2, "--max-np", 3, "--host-discovery-script", script,
                    PY, "-c", "pass"])
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("host %s does not resolve" % NOWHERE) == 1, r.stderr
    assert "epoch 1: 2 workers (localhost:0, localhost:1)" in r.stderr


def test_store_logs_rejected_connections_a_few_times():
    """A probe that opens and closes 20 connections to perseusrun's store: 3 lines, then a
    count when the store stops."""
    code = ("import os,socket\nif os.environ['PERSEUS_RANK'] == '0':\n"
            "    for _ in range(20):\n"
            "        socket.create_connection(('127.0.0.1', "
            "int(os.environ['PERSEUS_CONTROLLER_PORT']))).close()\n"
            "import time; time.sleep(0.5)")
    r = perseusrun(["-np", 2, PY, "-c", code])
    assert r.returncode == 0, r.stderr
    logged = r.stderr.count("store: dropped connection from")
    assert logged == 3, r.stderr
    assert "store: 17 more dropped connections were not logged" in r.stderr, r.stderr
