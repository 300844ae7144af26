"""PerseusProcessGroup: the perseus group on torch releases whose c10d Backend cannot be built
from Python.

Note [ProcessGroup route]: torch's binding of c10d's Backend has a Python constructor only in
newer releases (torch 2.11's has none: `Backend.__init__` is "No constructor defined"), but
its ProcessGroup has had one, with a trampoline that lets a Python subclass override the
collectives C++ calls (allreduce, broadcast, allgather, alltoall_base, reduce_scatter, the
coalesced tensor forms, barrier, send, recv). When a backend's creator returns a ProcessGroup,
_new_process_group_helper takes it as the group itself instead of registering it as a device's
backend; that is the route torch's own Python group (ProcessLocalGroup) takes. Then:
- torch.distributed's Python functions call the group's methods by their Python names, which
  this class maps onto PerseusOps (all_gather_into_tensor -> _allgather_base, ...);
- DDP's reducer and its parameter checks call allreduce, broadcast and allgather from C++
  through the trampoline;
- c10d keeps a group's name and description on its device backends; this group keeps them
  itself (getGroupName and the rest, which the trampoline also forwards);
- Python code that asks the group for a device's backend (`_get_backend`: FSDP2's allocator,
  eager connection with device_id) gets the group itself;
- C++ that reaches an op the trampoline does not forward (gather, scatter, reduce,
  _allgather_base) goes through the group's registered device backends, of which this group
  has none, and fails naming the missing backend. Functional collectives do not take that
  path: they reach the forwarded ops.
A group is one object for every device, so a mixed string ("cpu:gloo,cuda:perseus") cannot be
served: init_process_group refuses it (_route.refuse_mixed)."""

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from perseus.torch.distributed._backend import PerseusOps


class PerseusProcessGroup(PerseusOps, ProcessGroup):
    # -- ProcessGroup's Python names for the ops that c10d's Backend names otherwise -----

    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                      opts)

    # -- what c10d's ProcessGroup keeps on its device backends, of which this group has none ----

    def getGroupName(self):
        return self.__dict__.get("_torch_group_name", self.group_label)

    def setGroupName(self, name):
        self._torch_group_name = name

    def getGroupDesc(self):
        return self.__dict__.get("_torch_group_desc", "")

    def setGroupDesc(self, desc):
        self._torch_group_desc = desc

    # -- what torch's Python asks of a device's backend ---------------------------------------

    def _get_backend(self, device=None):
        return self

    def supports_tensor_alloc(self, device=None):
        return False

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None):
        raise dist.DistBackendError(
            "perseus: split_group needs perseus groups that are c10d Backends (torch %s cannot "
            "build them from Python, or prefer_process_group() was called); use "
            "new_group(ranks) or new_subgroups, which make the same process sets"
            % torch.__version__)

    def shrink(self, excluded, flags=0, opts=None):
        raise dist.DistBackendError(
            "perseus: shrink_group needs perseus groups that are c10d Backends (torch %s cannot "
            "build them from Python, or prefer_process_group() was called); after losing a "
            "rank, destroy the process group and call init_process_group again on the "
            "remaining ranks (python/perseus/examples/torch_distributed/elastic_ddp.py)"
            % torch.__version__)
