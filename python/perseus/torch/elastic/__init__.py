"""horovod.torch.elastic on Perseus: `hvd.elastic.run(train)(state)`, TorchState,
ElasticSampler, and the common State/ObjectState. See docs/elastic-api.md."""

from perseus.common.elastic.state import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State)
from perseus.torch.elastic.errors import run, run_fn  # noqa: F401
from perseus.torch.elastic.sampler import ElasticSampler  # noqa: F401
from perseus.torch.elastic.state import TorchState  # noqa: F401

__all__ = ["TorchState", "ElasticSampler", "run", "State", "ObjectState"]
