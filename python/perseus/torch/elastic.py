"""horovod.torch.elastic's names, so that code importing them loads; Perseus has no elastic
mode, and using any of them raises NotImplementedError saying so."""

_MESSAGE = ("horovod.torch.elastic.%s: Perseus has no elastic mode (jobs have a fixed size; "
            "restart the job from a checkpoint to change it)")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(_MESSAGE % name)
