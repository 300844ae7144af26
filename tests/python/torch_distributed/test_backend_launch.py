"""init_process_group("perseus") under each launcher and init method, each forming the job
and running an all_reduce: perseusrun (env://, then perseus://, then "cpu:gloo,cuda:perseus" in
one process: the engine starts again after destroy_process_group), torchrun, Open MPI's
mpirun (perseus://), and ranks started by hand (tcp://, then store=)."""
import pytest

from distsupport import free_port, mpirun, ok, perseusrun, processes, torchrun

pytestmark = pytest.mark.timeout(120)


def test_perseusrun_env_perseus_and_mixed():
    r, out = perseusrun(2, "launch@env", "launch@perseus", "launch_mixed")
    ok(r, out, "LAUNCH OK", 6)


def test_torchrun():
    r, out = torchrun(2, "launch@env")
    ok(r, out, "LAUNCH OK", 2)


def test_mpirun_perseus_rendezvous():
    r, out = mpirun(2, "launch@perseus")
    ok(r, out, "LAUNCH OK", 2)


def test_tcp_init_method_and_store_argument():
    r, out = processes(2, "launch@tcp://127.0.0.1:%d" % free_port(), "launch@store")
    ok(r, out, "LAUNCH OK", 4)
