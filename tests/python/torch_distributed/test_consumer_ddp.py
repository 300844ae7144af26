"""DDP with the built-in comm hooks (fp16, bf16, PowerSGD) on the perseus backend: the same
losses and weights as DDP on Gloo, from the same start and data (examples/ddp_comm_hooks.py)."""
import pytest

from consumer_support import assert_close, compare_backends

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)

# fp32 sums of 2 ranks are the same in any order; the compressed hooks round partial sums
# to 16 bits, where a backend that sums in fp32 first may round once less than Gloo.
TOLERANCE = {"none": 1e-6, "fp16": 1e-3, "bf16": 1e-2, "powersgd": 1e-4}


def test_ddp_comm_hooks_match_gloo():
    reference, tested = compare_backends(2, "ddp_comm_hooks.py", "--steps", "6")
    assert [r["hook"] for r in tested] == list(TOLERANCE)
    for ref, got in zip(reference, tested):
        assert_close(ref, got, TOLERANCE[ref["hook"]], "hook " + ref["hook"])
