"""Failures end every rank with torch's DistBackendError, naming the rank and the operation,
within the group's timeout: a rank that dies, and a collective that one rank never calls."""
import re

import pytest

from distsupport import processes

pytestmark = pytest.mark.timeout(120)


def test_rank_death():
    r, out = processes(2, "death")
    m = re.search(r"DEATH ERROR after ([0-9.]+) s: (.*)", out)
    assert m, out[-6000:]
    assert float(m.group(1)) < 30, out[-6000:]
    assert "allreduce" in m.group(2) and "rank 0" in m.group(2), out[-6000:]


def test_all_gather_into_tensor_of_different_sizes():
    r, out = processes(2, "gather_sizes")
    lines = re.findall(r"GATHER SIZES ERROR: (.*)", out)
    assert len(lines) == 2, out[-6000:]
    for message in lines:
        assert "all_gather_into_tensor" in message and "same shape" in message, out[-6000:]


def test_collective_that_never_matches():
    r, out = processes(2, "mismatch")
    lines = re.findall(r"MISMATCH ERROR after ([0-9.]+) s: (.*)", out)
    assert len(lines) == 2, out[-6000:]
    for seconds, message in lines:
        assert float(seconds) < 30, out[-6000:]
        assert "allreduce" in message or "broadcast" in message, out[-6000:]
