"""The "local" torch.distributed backend: every collective does only the local data movement
its result needs on this rank (allgather writes the rank's input into every slot,
reduce-scatter keeps the rank's chunk, the others leave their tensors alone) and sends nothing.
A training step on it is the step without communication: DDP's or FSDP2's own work, the
compute and the copies, which no backend can go below. ddp.py and fsdp.py run it as the floor
of their tables (run.py), so that a bar is judged against what is reachable in the same run.

    import local_backend; local_backend.register()
    dist.init_process_group("local", ...)
"""
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, ProcessGroup, Work


class _Done(Work):
    def __init__(self, outputs):
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


class _Local:
    def getBackendName(self):
        return "local"

    def _get_backend_name(self):
        return "local"

    def allreduce(self, tensors, opts=None):
        return _Done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return _Done(tensors)

    def broadcast(self, tensors, opts=None):
        return _Done(tensors)

    def reduce(self, tensors, opts=None):
        return _Done(tensors)

    def barrier(self, opts=None):
        return _Done([])

    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            for o in outs:
                o.copy_(t)
        return _Done([o for outs in output_lists for o in outs])

    def all_gather_single(self, output, input, opts=None):
        for chunk in output.chunk(self.size()):
            chunk.copy_(input.view(chunk.shape))
        return _Done([output])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self.all_gather_single(o, i)
        return _Done(outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        for o, ins in zip(outputs, input_lists):
            o.copy_(ins[self.rank()])
        return _Done(outputs)

    def reduce_scatter_single(self, output, input, opts=None):
        output.copy_(input.chunk(self.size())[self.rank()].view(output.shape))
        return _Done([output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self.reduce_scatter_single(o, i)
        return _Done(outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        output.copy_(input)
        return _Done([output])

    # ProcessGroup's Python names for the same operations (the route without a Backend)
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single


class LocalBackend(_Local, Backend):
    pass


class LocalProcessGroup(_Local, ProcessGroup):
    """For torch releases whose c10d Backend has no Python constructor: the group is its own
    backend for every device (as perseus's, Note [ProcessGroup route])."""

    def _get_backend(self, device=None):
        return self

    def getGroupName(self):
        return self.__dict__.get("_name", "local")

    def setGroupName(self, name):
        self._name = name

    def getGroupDesc(self):
        return self.__dict__.get("_desc", "")

    def setGroupDesc(self, desc):
        self._desc = desc


def _can_construct_backend():
    try:
        LocalBackend(0, 1)
        return True
    except TypeError:
        return False


def register():
    cls = LocalBackend if _can_construct_backend() else LocalProcessGroup
    dist.Backend.register_backend(
        "local", lambda store, rank, size, timeout: cls(rank, size), devices=["cpu"])
