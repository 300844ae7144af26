"""GluonState.restore() after a failed write to a parameter (found by the MXNet chaos soak,
bench/chaos/soak.py --framework mxnet: after some kills the same membership failed again and
again with no collective failing, then hung). MXNet's engine keeps a failed operation's error
on the arrays it writes, here a weight written by an optimizer update that read a gradient
whose allreduce failed; a copy into such an array is skipped and the error comes back at the
next read. restore() must clear it, so that the weights are the committed ones and the next
membership does not fail on the last one's error.

One process (no launcher): the failed write is an MXNet custom operator that raises, as the
collective's completion does when a peer is lost."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402

pytest.importorskip("mxnet")
pytestmark = pytest.mark.timeout(120)

SCRIPT = """
import mxnet as mx
from mxnet import gluon
import perseus.mxnet as hvd

class Failing(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        raise RuntimeError("a peer was lost")

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        pass

@mx.operator.register("failing")
class FailingProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["x"]

    def list_outputs(self):
        return ["y"]

    def infer_shape(self, shapes):
        return shapes, [shapes[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Failing()

hvd.init()
net = gluon.nn.Dense(3, in_units=2)
net.initialize(mx.init.Constant(1.0))
state = hvd.elastic.GluonState(params=net.collect_params(), step=0)
weight = net.weight.data()
mx.nd.Custom(weight, op_type="failing", out=weight)  # the failed write, never waited on
state.restore()
print("restored", net.weight.data().asnumpy().ravel().tolist())
"""


def test_restore_clears_a_failed_write_and_restores_the_commit():
    proc = subprocess.run([relsupport.PY, "-c", SCRIPT], env=relsupport.job_env(),
                          capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "restored [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]" in proc.stdout, proc.stdout + proc.stderr
