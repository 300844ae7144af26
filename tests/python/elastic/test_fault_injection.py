"""perseus.common.fault_injection, the test-only exit hook of the chaos soak: it exits (status
86, a line in PERSEUS_TEST_EXIT_RECORD) at the armed phase only, reads the setting at every
call, and rejects a phase it does not know instead of silently testing nothing."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SCRIPT = """
import os
from perseus.common import fault_injection
fault_injection.exit_at("commit")        # not armed yet: returns
os.environ["PERSEUS_TEST_EXIT_AT"] = "negotiation"
fault_injection.exit_at("commit")        # another phase: returns
fault_injection.exit_at("negotiation")   # exits
print("not reached")
"""


def test_exits_at_the_armed_phase_only(tmp_path):
    record = tmp_path / "exits.txt"
    env = relsupport.job_env(PERSEUS_TEST_EXIT_RECORD=record, PERSEUS_ELASTIC_WORKER_ID="h:3")
    env.pop("PERSEUS_TEST_EXIT_AT", None)
    proc = subprocess.run([relsupport.PY, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 86, (proc.stdout, proc.stderr)
    assert "not reached" not in proc.stdout
    phase, worker, _ = record.read_text().split()
    assert (phase, worker) == ("negotiation", "h:3")


def test_a_misspelt_phase_is_an_error(monkeypatch):
    from perseus.common import fault_injection
    monkeypatch.setenv("PERSEUS_TEST_EXIT_AT", "comit:0.5")
    with pytest.raises(ValueError, match="the phase must be one of negotiation"):
        fault_injection.exit_at("commit")
    monkeypatch.setenv("PERSEUS_TEST_EXIT_AT", "commit:0")
    fault_injection.exit_at("commit")  # probability 0: never exits, so the test goes on
