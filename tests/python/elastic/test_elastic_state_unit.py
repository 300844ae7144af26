"""Single-process parts of the elastic state layer: the collective sync decision's rule
(perseus.common.elastic.sync.decide) and ElasticSampler's index bookkeeping, including the
re-split of an epoch's remainder over a new size."""

import pytest

import perseus_test_support  # noqa: F401  (the source tree on sys.path when needed)
from perseus.common import basics
from perseus.common.elastic.sync import NO_STATE, decide


def test_first_entry_syncs_from_rank_0():
    assert decide([NO_STATE] * 3, [True] * 3) == (True, 0, NO_STATE)


def test_source_is_lowest_rank_with_newest_commit():
    # Rank 0 failed before committing 8; ranks 1 and 2 committed it.
    assert decide([7, 8, 8], [True, True, True]) == (True, 1, 8)


def test_new_worker_gets_state_from_a_survivor_even_at_rank_0():
    # The new worker is rank 0 and holds nothing; the survivors need nothing themselves.
    assert decide([NO_STATE, 5, 5], [True, False, False]) == (True, 1, 5)


def test_survivors_in_lockstep_skip_the_sync():
    assert decide([4, 4], [False, False]) == (False, 0, 4)


def test_differing_commits_force_a_sync_nobody_asked_for():
    assert decide([4, 3, 4], [False, False, False]) == (True, 0, 4)


def test_one_rank_asking_makes_everyone_sync():
    assert decide([2, 2, 2], [False, False, True]) == (True, 0, 2)


def test_decide_rejects_mismatched_tables():
    with pytest.raises(ValueError):
        decide([1, 2], [True])


torch = pytest.importorskip("torch")
from perseus.torch.elastic import ElasticSampler  # noqa: E402


@pytest.fixture
def membership(monkeypatch):
    """Sets the rank() and size() the sampler reads, as a reset would."""
    def set_to(rank, size):
        monkeypatch.setattr(basics, "rank", lambda: rank)
        monkeypatch.setattr(basics, "size", lambda: size)
    return set_to


def shares(membership, dataset, size, state=None, shuffle=True):
    """Every rank's list of indices for the rest of the epoch described by `state`."""
    out = []
    for r in range(size):
        membership(r, size)
        s = ElasticSampler(dataset, shuffle=shuffle, seed=3)
        if state:
            s.load_state_dict(state)
        out.append(list(s))
    return out


def test_sampler_partitions_like_horovod(membership):
    membership(1, 4)
    s = ElasticSampler(list(range(10)), shuffle=False)
    assert len(s) == 3
    assert list(s) == [1, 5, 9]
    assert s.get_indices(0, 2) == [1, 5] and s.get_indices(1, 2) == [9]


def test_sampler_records_batches_and_resplits_the_rest_over_a_new_size(membership):
    membership(0, 3)
    data = list(range(30))
    s = ElasticSampler(data, shuffle=True, seed=3)
    s.set_epoch(2)
    order = list(s)
    s.record_batch(0, 2)
    s.record_indices(s.get_indices(1, 2))
    assert s.state_dict() == {"epoch": 2, "processed_num": 12}
    state = s.state_dict()
    membership(0, 3)
    before = shares(membership, data, 3, {"epoch": 2, "processed_num": 0})
    assert before[0] == order
    after = shares(membership, data, 2, state)  # one rank gone: 18 positions left, 9 each
    done = {i for rank_share in before for i in rank_share[:4]}
    assert len(done) == 12
    left = [i for rank_share in after for i in rank_share]
    assert len(left) == 18 and set(left) == set(data) - done


def test_sampler_pads_to_equal_shares(membership):
    after = shares(membership, list(range(7)), 3, {"epoch": 0, "processed_num": 2}, shuffle=False)
    assert after == [[2, 5], [3, 6], [4, 2]]


def test_set_epoch_clears_progress_and_reshuffles(membership):
    membership(0, 1)
    s = ElasticSampler(list(range(50)), seed=1)
    first = list(s)
    s.record_batch(0, 10)
    s.set_epoch(1)
    assert s.processed_num == 0 and len(s) == 50 and list(s) != first
    assert sorted(s) == list(range(50))


def test_mxnet_errors_of_collectives_count_as_perseus_errors():
    """An MXNetError stands for the exception object of the collective that failed: the one a
    blocking collective raised it from, or the one perseus.mxnet recorded when a collective in
    MXNet's engine failed (the engine passes only text on to the arrays). No text is parsed."""
    from perseus_test_support import require_mxnet
    require_mxnet()
    import mxnet as mx
    from perseus.common import exceptions
    from perseus.mxnet import mpi_ops
    from perseus.mxnet.elastic import _perseus_error

    mpi_ops.forget_failures()
    plain = mx.base.MXNetError("allreduce 'g': rank 2 lost (PeerLostError)")
    assert _perseus_error(plain) is plain  # no collective failed: the text does not count
    shut_down = exceptions.ShutDownError("shut down")
    try:
        raise mx.base.MXNetError("allgather: shut down") from shut_down
    except mx.base.MXNetError as wrapped:
        assert _perseus_error(wrapped) is shut_down
    lost = exceptions.PeerLostError("rank 2 lost")
    mpi_ops._record_failure(lost)  # as the callback of a failed engine collective does
    mpi_ops._record_failure(exceptions.ShutDownError("later, and a consequence"))
    kept = mpi_ops.collective_failure()  # the first one, without the frames that raised it
    assert type(kept) is exceptions.PeerLostError and str(kept) == "rank 2 lost", kept
    assert kept.__traceback__ is None
    assert _perseus_error(mx.base.MXNetError("any text at all")) is kept
    other = ValueError("not MXNet's")
    assert _perseus_error(other) is other
    mpi_ops.forget_failures()
    assert mpi_ops.collective_failure() is None


def test_distributed_optimizer_of_an_elastic_job_hooks_at_size_1():
    """An elastic job that starts with one worker may grow: its DistributedOptimizer must
    allreduce once there are peers, so it hooks the gradients at size 1 too (Horovod does the
    same under HOROVOD_ELASTIC=1)."""
    import os
    import subprocess
    import sys
    pytest.importorskip("torch")
    script = ("import torch, perseus.torch as hvd\n"
              "hvd.init()\n"
              "m = torch.nn.Linear(2, 1)\n"
              "opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),\n"
              "                               named_parameters=m.named_parameters())\n"
              "m(torch.ones(1, 2)).sum().backward()\n"
              "opt.step()\n"
              "print(hvd.size(), len(opt._hook_handles) > 0)\n")
    env = dict(os.environ)
    for key in [k for k in env if k.startswith(("PERSEUS_", "HOROVOD_"))]:
        if key != "PERSEUS_BUILD_DIR":
            del env[key]
    out = {}
    for elastic in ("0", "1"):
        env["HOROVOD_ELASTIC"] = elastic
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        out[elastic] = run.stdout.split()
    assert out == {"0": ["1", "False"], "1": ["1", "True"]}
