"""Shared helpers for the Python tests: every multi-rank test starts real processes through perseusrun.

Which perseus is tested: an installed package (pip install .) by default; with
PERSEUS_BUILD_DIR=<cmake build dir with -DPERSEUS_BUILD_PYTHON=ON> the source tree's
python/perseus plus that build's _core."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"

if os.environ.get("PERSEUS_BUILD_DIR"):
    sys.path.insert(0, str(REPO / "python"))


def job_env(**extra):
    env = dict(os.environ)
    if os.environ.get("PERSEUS_BUILD_DIR"):
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    env.setdefault("PERSEUS_TIMEOUT", "20")
    env.setdefault("PERSEUS_START_TIMEOUT", "30")
    env.update(extra)
    return env


def perseusrun(args, timeout=120, env=None, **kwargs):
    """Runs perseusrun with `args` (a list) and returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "perseus.runner"] + [str(a) for a in args],
                          env=env or job_env(), capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run_worker(np, worker, *args, timeout=150, env=None, extra=()):
    """Runs tests/python/workers/<worker> on np ranks; fails the test with both outputs if
    any rank fails."""
    result = perseusrun(["-np", np] + list(extra) + [sys.executable, WORKERS / worker] +
                        list(args), timeout=timeout, env=env)
    assert result.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        result.returncode, result.stdout[-6000:], result.stderr[-6000:])
    return result


def require(present, what):
    """Skips a test whose launcher is not installed, except in CI (CI=true), where
    scripts/setup.sh has installed every launcher the tests use: there it fails."""
    import pytest  # here: bench/ imports this module without pytest
    if present:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail("%s is missing and CI=true: scripts/setup.sh installs it" % what)
    pytest.skip("needs %s (scripts/setup.sh installs it)" % what)


def require_mxnet():
    """Skips a test that needs MXNet where it is not installed (fails under CI=true, where
    scripts/setup.sh installs it). importorskip("mxnet") alone is not enough: any folder named
    mxnet on sys.path (the working directory's, for one) imports as an empty namespace package."""
    try:
        import mxnet
        present = hasattr(mxnet, "nd")
    except ImportError:
        present = False
    require(present, "MXNet (mxnet==1.9.1)")
