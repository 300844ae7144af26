"""The data-movement operations of PerseusBackend: allgather, reduce_scatter, alltoall,
gather and scatter, in each of torch's forms. A mixin of PerseusBackend, whose helpers
(_name, _submit, _work, _core, _ps) it uses; outputs the engine allocates are copied into the
caller's tensors when the Work completes (Note [Work completion] in _work.py)."""

import torch

from perseus.common.exceptions import InvalidArgumentError
from perseus.torch import _tensors as _t
from perseus.torch.distributed import _reduce


def _engine_writes(whole, part, size):
    """Whether the engine can work on the caller's tensors in place (Note [Allgather into]):
    CPU tensors of a dtype the core has, `whole` contiguous and exactly `size` times `part`
    (an allgather's output and input, a reduce-scatter's rows and block)."""
    return (part.device.type == "cpu" and whole.device.type == "cpu"
            and part.dtype in _t.NATIVE and whole.dtype == part.dtype
            and whole.is_contiguous() and whole.numel() == size * part.numel()
            and part.numel() > 0)


class DataMovement:
    # -- allgather --------------------------------------------------------------------------

    def _allgather_flat(self, kind, inputs):
        """Submits an allgather of each input flattened; returns (handle, restores, wires)."""
        wires = [_t.to_wire(x.reshape(-1), kind, self.group_label) for x in inputs]
        core = self._core
        ps, stream = self._ps, _t.stream_of(wires[0][0])
        if len(wires) == 1:
            h = self._submit(self._name(kind, wires[0][0], False), lambda n: core.allgather(
                n, _t.capsule(wires[0][0]), ps, stream))
        else:
            h = self._submit(self._name("%s.%d" % (kind, len(wires)), wires[0][0], False),
                             lambda n: core.grouped_allgather(
                                 n, [_t.capsule(w) for w, _ in wires], ps, stream))
        return h, wires

    def _gathered(self, h, wires, i):
        return wires[i][1](_t.library_output(h, i))

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs, x = output_tensors[0], input_tensors[0]
        h, wires = self._allgather_flat("allgather", [x])

        def finish():
            flat = self._gathered(h, wires, 0)
            at = 0
            for o in outs:
                n = o.numel()
                o.copy_(flat[at:at + n].view(o.shape))
                at += n
        return self._work("allgather", h, output_tensors, finish, x)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        h, wires = self._allgather_flat("allgather_coalesced", input_list)

        def finish():
            for i, outs in enumerate(output_lists):
                flat = self._gathered(h, wires, i)
                at = 0
                for o in outs:
                    n = o.numel()
                    o.copy_(flat[at:at + n].view(o.shape))
                    at += n
        return self._work("allgather_coalesced", h, output_lists, finish, input_list[0])

    def all_gather_single(self, output, input, opts=None):
        if _engine_writes(output, input, self.size()):
            return self._allgather_into(output, input)
        h, wires = self._allgather_flat("all_gather_into_tensor", [input])
        finish = lambda: output.view(-1).copy_(self._gathered(h, wires, 0))  # noqa: E731
        return self._work("all_gather_into_tensor", h, [output], finish, input)

    _allgather_base = all_gather_single

    def _allgather_into(self, output, input):
        """The engine writes every rank's input into `output` itself (Note [Allgather into]):
        no library output, no copy when the Work completes."""
        x, out = input.detach().reshape(-1), output.detach().view(-1)
        core, ps = self._core, self._ps
        h = self._submit(self._name("all_gather_into_tensor", x, False),
                         lambda n: core.allgather_into_tensor(n, _t.capsule(x), _t.capsule(out),
                                                              ps))
        return self._work("all_gather_into_tensor", h, [output], None, input)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        h, wires = self._allgather_flat("all_gather_into_tensor_coalesced", inputs)

        def finish():
            for i, o in enumerate(outputs):
                o.view(-1).copy_(self._gathered(h, wires, i))
        return self._work("all_gather_into_tensor_coalesced", h, outputs, finish, inputs[0])

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # -- reduce_scatter -----------------------------------------------------------------------

    def _reducescatter_rows(self, kind, rows, opts):
        """rows: tensors of shape (group size, m), each reduced and scattered a row per rank."""
        op, pre = _reduce.core_op(opts.reduceOp, kind)
        for r in rows:
            _t.check_reducible(r, kind, self.group_label)
        core = self._core
        ps, stream = self._ps, _t.stream_of(rows[0])
        if len(rows) == 1:
            return self._submit(self._name(kind, rows[0]), lambda n: core.reducescatter(
                n, _t.capsule(rows[0]), op, pre, 1.0, ps, stream))
        return self._submit(self._name("%s.%d" % (kind, len(rows)), rows[0]),
                            lambda n: core.grouped_reducescatter(
                                n, [_t.capsule(r) for r in rows], op, pre, 1.0, ps, stream))

    def _rows(self, x, out, what):
        size = self.size()
        if x.numel() != size * out.numel():
            raise InvalidArgumentError(
                "perseus: %s: the input has %d elements, not the group size %d times the "
                "output's %d" % (what, x.numel(), size, out.numel()))
        return x.contiguous().view(size, -1)

    def reduce_scatter(self, output_tensors, input_lists, opts):
        out, ins = output_tensors[0], input_lists[0]
        if any(i.numel() != out.numel() for i in ins) or len(ins) != self.size():
            raise InvalidArgumentError("perseus: reduce_scatter: give one input per rank, each "
                                       "the size of the output")
        rows = torch.stack([i.reshape(-1) for i in ins])
        h = self._reducescatter_rows("reduce_scatter", [rows], opts)
        finish = lambda: out.view(-1).copy_(_t.library_output(h, 0).view(-1))  # noqa: E731
        return self._work("reduce_scatter", h, output_tensors, finish, out)

    def reduce_scatter_single(self, output, input, opts):
        rows = self._rows(input, output, "reduce_scatter_tensor")
        if _engine_writes(rows, output, self.size()) and output.is_contiguous():
            return self._reducescatter_into(output, rows, opts)
        h = self._reducescatter_rows("reduce_scatter_tensor", [rows], opts)
        finish = lambda: output.view(-1).copy_(_t.library_output(h, 0).view(-1))  # noqa: E731
        return self._work("reduce_scatter_tensor", h, [output], finish, output)

    _reduce_scatter_base = reduce_scatter_single

    def _reducescatter_into(self, output, rows, opts):
        """The engine writes this rank's reduced block into `output` itself (Note [Allgather
        into]); named as _reducescatter_rows names it, so ranks may take either path."""
        kind = "reduce_scatter_tensor"
        op, pre = _reduce.core_op(opts.reduceOp, kind)
        _t.check_reducible(rows, kind, self.group_label)
        out = output.detach().view(1, -1)
        core, ps = self._core, self._ps
        h = self._submit(self._name(kind, rows), lambda n: core.reducescatter_into_tensor(
            n, _t.capsule(rows), _t.capsule(out), op, pre, 1.0, ps))
        return self._work(kind, h, [output], None, output)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        rows = [self._rows(i, o, "reduce_scatter_tensor_coalesced")
                for i, o in zip(inputs, outputs)]
        h = self._reducescatter_rows("reduce_scatter_tensor_coalesced", rows, opts)

        def finish():
            for i, o in enumerate(outputs):
                o.view(-1).copy_(_t.library_output(h, i).view(-1))
        return self._work("reduce_scatter_tensor_coalesced", h, outputs, finish, outputs[0])

    # The names other torch releases give the coalesced single-tensor ops.
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- alltoall / gather / scatter ------------------------------------------------------

    def _alltoall(self, kind, wire, splits):
        core = self._core
        ps, stream = self._ps, _t.stream_of(wire)
        return self._submit(self._name(kind, wire, False), lambda n: core.alltoall(
            n, _t.capsule(wire), splits, ps, stream))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        wire, restore = _t.to_wire(input, "all_to_all_single", self.group_label)
        splits = [int(s) for s in input_split_sizes] if input_split_sizes else None
        h = self._alltoall("all_to_all_single", wire, splits)
        finish = lambda: output.copy_(restore(_t.library_output(h, 0)).view(output.shape))  # noqa
        return self._work("all_to_all_single", h, [output], finish, input)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        flat = torch.cat([i.reshape(-1) for i in input_tensors])
        wire, restore = _t.to_wire(flat, "all_to_all", self.group_label)
        h = self._alltoall("all_to_all", wire, [i.numel() for i in input_tensors])

        def finish():
            got = restore(_t.library_output(h, 0))
            at = 0
            for o in output_tensors:
                n = o.numel()
                o.copy_(got[at:at + n].view(o.shape))
                at += n
        return self._work("all_to_all", h, output_tensors, finish, flat)

    def gather(self, output_lists, input_tensors, opts):
        # An allgather whose result only the root keeps: the engine has no rooted gather.
        root = self._root(opts.rootRank, "gather")
        x = input_tensors[0]
        h, wires = self._allgather_flat("gather", [x])
        outs = output_lists[0] if self.rank() == root else []

        def finish():
            if not outs:
                return
            flat = self._gathered(h, wires, 0)
            n = x.numel()
            for i, o in enumerate(outs):
                o.copy_(flat[i * n:(i + 1) * n].view(o.shape))
        return self._work("gather", h, output_lists, finish, x)

    def scatter(self, output_tensors, input_lists, opts):
        # An alltoall in which only the root sends, one block to each rank.
        root = self._root(opts.rootRank, "scatter")
        out = output_tensors[0]
        n = out.numel()
        if self.rank() == root:
            flat = torch.cat([i.reshape(-1) for i in input_lists[0]])
            splits = [i.numel() for i in input_lists[0]]
        else:
            flat = out.new_empty((0,))
            splits = [0] * self.size()
        wire, restore = _t.to_wire(flat, "scatter", self.group_label)
        h = self._alltoall("scatter", wire, splits)
        finish = lambda: out.view(-1).copy_(restore(_t.library_output(h, 0))[:n])  # noqa: E731
        return self._work("scatter", h, output_tensors, finish, out)
