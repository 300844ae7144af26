"""Host lists, hostfiles and rank placement (pure functions)."""

import pytest

from perseus.runner import hosts


def test_parse_hosts():
    assert hosts.parse_hosts("a:2,b:4") == [("a", 2), ("b", 4)]
    assert hosts.parse_hosts("a,b:3") == [("a", 1), ("b", 3)]
    with pytest.raises(ValueError):
        hosts.parse_hosts("a:0")
    with pytest.raises(ValueError):
        hosts.parse_hosts(" , ")


def test_parse_hostfile(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# comment\nnode1 slots=4\n\nnode2 slots=2 max_slots=8  # trailing\n"
                 "node3\nnode4:3\n")
    assert hosts.parse_hostfile(str(f)) == [("node1", 4), ("node2", 2), ("node3", 1),
                                            ("node4", 3)]
    f.write_text("node1 cores=4\n")
    with pytest.raises(ValueError, match="unknown field"):
        hosts.parse_hostfile(str(f))
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no hosts"):
        hosts.parse_hostfile(str(f))


def test_assign_slots_fills_hosts_in_order():
    slots = hosts.assign_slots([hosts.HostSlots("a", 2), hosts.HostSlots("b", 2)], 3)
    assert [(s.rank, s.host, s.local_rank, s.local_size, s.cross_rank, s.cross_size)
            for s in slots] == [(0, "a", 0, 2, 0, 2), (1, "a", 1, 2, 0, 1),
                                (2, "b", 0, 1, 1, 2)]
    with pytest.raises(ValueError, match="more processes"):
        hosts.assign_slots([hosts.HostSlots("a", 1)], 2)


def test_local_detection():
    assert hosts.is_local("localhost")
    assert hosts.is_local("127.0.0.1")
    assert not hosts.is_local("127.0.0.2")
