"""Launching the torch.distributed examples (python/perseus/examples/torch_distributed) for the
test_consumer_* files: through torchrun or perseusrun, each with a deadline, and comparing an
example's records under the perseus backend with the same records under Gloo."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from perseus_test_support import REPO, job_env, perseusrun

EXAMPLES = REPO / "python" / "perseus" / "examples" / "torch_distributed"
COMPARE = Path(__file__).resolve().parent / "workers" / "consumer_compare.py"
# The backend under test; PERSEUS_CONSUMER_BACKEND=gloo runs every consumer test against Gloo
# alone, which checks the tests themselves.
BACKEND = os.environ.get("PERSEUS_CONSUMER_BACKEND", "perseus")
REFERENCE = "gloo"


def _check(result, what):
    assert result.returncode == 0, "%s: exit %d\nstdout:\n%s\nstderr:\n%s" % (
        what, result.returncode, result.stdout[-6000:], result.stderr[-6000:])
    return result


def torchrun(np, script, *args, timeout=150):
    """Runs `python script args` on np local ranks through torchrun; fails with both outputs
    unless every rank exits 0."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(np), str(script)] + [str(a) for a in args]
    result = subprocess.run(cmd, env=job_env(OMP_NUM_THREADS="1"), capture_output=True,
                            text=True, timeout=timeout)
    return _check(result, "torchrun " + Path(script).name)


def perseusrun_script(np, script, *args, timeout=150):
    result = perseusrun(["-np", np, sys.executable, script] + list(args), timeout=timeout,
                        env=job_env(OMP_NUM_THREADS="1"))
    return _check(result, "perseusrun " + Path(script).name)


def perseusrun_elastic(flags, script, *args, timeout=150):
    """perseusrun in elastic mode (`flags`: -np, --min-np, -H ...); a short lost-peer timeout
    so that survivors learn of a loss quickly."""
    result = perseusrun(list(flags) + [sys.executable, script] + [str(a) for a in args],
                        timeout=timeout, env=job_env(OMP_NUM_THREADS="1", PERSEUS_TIMEOUT="10"))
    return _check(result, "perseusrun (elastic) " + Path(script).name)


def compare_backends(np, example, *args, timeout=150):
    """Runs examples/<example> under REFERENCE then BACKEND in one torchrun launch; returns
    (reference records, records under test)."""
    out = torchrun(np, COMPARE, "%s,%s" % (REFERENCE, BACKEND), EXAMPLES / example, *args,
                   timeout=timeout).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULTS "))
    results = json.loads(line[len("RESULTS "):])
    return results[REFERENCE], results[BACKEND]


def assert_close(expected, actual, rel, what):
    """Every number in `actual` (nested lists/dicts) within `rel` of `expected`'s."""
    if isinstance(expected, dict):
        assert expected.keys() == actual.keys(), what
        for key in expected:
            assert_close(expected[key], actual[key], rel, "%s.%s" % (what, key))
    elif isinstance(expected, list):
        assert len(expected) == len(actual), what
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_close(e, a, rel, "%s[%d]" % (what, i))
    elif isinstance(expected, float):
        assert math.isclose(expected, actual, rel_tol=rel, abs_tol=rel), \
            "%s: %r under %s, %r under %s" % (what, expected, REFERENCE, actual, BACKEND)
    else:
        assert expected == actual, "%s: %r under %s, %r under %s" % (
            what, expected, REFERENCE, actual, BACKEND)
