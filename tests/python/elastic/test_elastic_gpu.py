"""Elastic mode on a GPU (the device machine): three workers on one GPU (host-staged), one
killed mid-loop; the other two reset, rebuild the GPU backend's state for the new membership
and finish on CUDA tensors."""

import os
import signal
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_elastic_local import ElasticJob, final  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_gpu_workers_survive_a_loss_and_rebuild_their_gpu_state(tmp_path):
    job = ElasticJob(tmp_path, ["-np", "3", "--min-np", "2", "-H", "localhost:3"], steps=40,
                     worker=HERE / "workers" / "elastic_torch_gpu.py", timeout=200)
    try:
        job.start()
        job.wait_steps(3, 10, timeout=120)
        os.kill(job.pid("localhost:1"), signal.SIGKILL)
        code = job.wait().returncode
        assert code == 0, job.output()
        done = final(job.records())
        for w in ("localhost:0", "localhost:2"):
            assert done[w] and done[w][0]["size"] == 2 and done[w][0]["step"] == 40, (w, done)
    finally:
        job.finish()


def test_gpu_job_grows_when_discovery_adds_a_slot(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:2\n")
    job = ElasticJob(tmp_path, ["-np", "2", "--min-np", "2", "--max-np", "3",
                                "--host-discovery-script", "cat %s" % hosts], steps=250,
                     worker=HERE / "workers" / "elastic_torch_gpu.py", timeout=200)
    try:
        job.start()
        job.wait_steps(2, 10, timeout=120)
        # The members train on while the newcomer starts and warms up (it joins once ready),
        # so the job must outlast a CUDA worker's start-up: 240 more steps of 0.1 s.
        hosts.write_text("localhost:3\n")
        code = job.wait().returncode
        assert code == 0, job.output()
        done = final(job.records())
        for w in ("localhost:0", "localhost:1", "localhost:2"):
            assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 250, (w, done)
    finally:
        job.finish()
