"""horovod.torch.elastic on Perseus: `hvd.elastic.run(train)(state)`, TorchState,
ElasticSampler, and the common State/ObjectState. See docs/elastic-api.md."""

from perseus.common.elastic import worker as elastic_worker
from perseus.common.elastic.state import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State)
from perseus.torch.elastic.errors import run, run_fn  # noqa: F401
from perseus.torch.elastic.sampler import ElasticSampler  # noqa: F401
from perseus.torch.elastic.state import TorchState  # noqa: F401


def _import_what_the_first_optimizer_imports():
    # torch.optim.Optimizer.__init__ imports torch._dynamo on first use (Note [A new worker
    # warms up before it is ready]); a torch without it builds optimizers without it too.
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass


elastic_worker.before_ready(_import_what_the_first_optimizer_imports)

__all__ = ["TorchState", "ElasticSampler", "run", "State", "ObjectState"]
