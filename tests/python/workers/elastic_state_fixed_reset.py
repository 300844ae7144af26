"""hvd.elastic.run in a job that perseusrun did not start in elastic mode: after a
PerseusInternalError on every rank, the reset cannot re-form the job, and run() raises an error
saying so (instead of retrying or hanging)."""

import perseus.torch as hvd
from perseus.common.exceptions import PerseusInternalError


@hvd.elastic.run
def train(state):
    state.step += 1
    state.commit()
    raise PerseusInternalError("simulated failure on every rank")


hvd.init()
train(hvd.elastic.ObjectState(step=0))
