"""init_process_group("perseus") under each launcher and init method: perseusrun (env://),
torchrun, Open MPI's mpirun (perseus://), tcp://, store=, and the mixed "cpu:gloo,cuda:perseus"
string; each forms the job and runs an all_reduce."""
import pytest

from distsupport import free_port, mpirun, ok, perseusrun, processes, torchrun

pytestmark = pytest.mark.timeout(120)


def test_perseusrun_env():
    r, out = perseusrun(2, "launch", "env")
    ok(r, out, "LAUNCH OK", 2)


def test_perseusrun_perseus_rendezvous():
    r, out = perseusrun(2, "launch", "perseus")
    ok(r, out, "LAUNCH OK", 2)


def test_torchrun():
    r, out = torchrun(2, "launch", "env")
    ok(r, out, "LAUNCH OK", 2)


def test_mpirun_perseus_rendezvous():
    r, out = mpirun(2, "launch", "perseus")
    ok(r, out, "LAUNCH OK", 2)


def test_tcp_init_method():
    r, out = processes(2, "launch", "tcp://127.0.0.1:%d" % free_port())
    ok(r, out, "LAUNCH OK", 2)


def test_store_argument():
    r, out = processes(2, "launch", "store")
    ok(r, out, "LAUNCH OK", 2)


def test_mixed_backend_string():
    r, out = perseusrun(2, "launch_mixed")
    ok(r, out, "LAUNCH OK", 2)
