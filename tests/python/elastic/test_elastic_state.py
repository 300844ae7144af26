"""The elastic State layer (hvd.elastic.run, State, ObjectState, TorchState, ElasticSampler,
GluonState, KVStoreState) on real ranks started by perseusrun, at fixed membership: resets are
elastic_worker.reset() re-initialising the same job. The workers are
tests/python/workers/elastic_state_torch.py and elastic_state_mx.py."""

import sys
import time

import pytest

from perseus_test_support import WORKERS, perseusrun, require_mxnet, run_worker

pytestmark = pytest.mark.timeout(300)

TORCH_CHECKS = ["first_sync_sgd", "first_sync_adam", "commit_restore_sgd",
                "commit_restore_adam", "retry_newest_sgd", "retry_newest_adam",
                "hosts_updated", "object_state", "sampler"]
MX_CHECKS = ["gluon_distributed_trainer", "gluon_trainer_on_kvstore", "kvstore_state",
             "kvstore_state_new_worker"]


def passed(result):
    return [line.split()[-1] for line in result.stdout.splitlines() if "PASS " in line]


@pytest.mark.parametrize("np", [2, 3])
def test_torch_state_on_real_ranks(np):
    pytest.importorskip("torch")
    result = run_worker(np, "elastic_state_torch.py", timeout=150)
    for check in TORCH_CHECKS:
        assert passed(result).count(check) == np, (check, result.stdout[-3000:])


def test_mxnet_state_on_real_ranks():
    require_mxnet()
    result = run_worker(2, "elastic_state_mx.py", timeout=150)
    for check in MX_CHECKS:
        assert passed(result).count(check) == 2, (check, result.stdout[-3000:])


def test_run_in_a_fixed_job_fails_clearly_when_it_cannot_reset():
    pytest.importorskip("torch")
    started = time.monotonic()
    result = perseusrun(["-np", 2, sys.executable, WORKERS / "elastic_state_fixed_reset.py"],
                        timeout=120)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "could not be reset after PerseusInternalError" in result.stderr, result.stderr
    assert "was not started in elastic mode" in result.stderr, result.stderr
    assert time.monotonic() - started < 90
