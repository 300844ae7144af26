"""torch.distributed.checkpoint on the perseus backend: a sharded FSDP2 model and optimizer
saved with dcp.save and loaded into a differently initialised model with dcp.load continue
exactly as the original (examples/fsdp2_checkpoint.py), and as on Gloo."""
import pytest

from consumer_support import assert_close, compare_backends

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)


def test_dcp_save_load_of_fsdp2_state_dict(tmp_path):
    reference, tested = compare_backends(2, "fsdp2_checkpoint.py")
    record = tested[0]
    assert record["resumed"] == record["original"]  # bit for bit: the whole state came back
    assert_close(reference, tested, 1e-5, "checkpoint")
