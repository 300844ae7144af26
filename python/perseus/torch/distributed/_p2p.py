"""send/recv of the perseus backend, through the group's torch store.

Note [Point to point]: the engine's operations are collectives of a whole process set, and a
set is made by every rank of the job, so a pair of ranks cannot make one on its own when they
first talk. send/recv therefore travel through torch's store (the TCPStore that
init_process_group made, or the one given): the sender sets a key named by the pair, the tag
and a sequence number per (pair, tag), and the receiver waits for it, reads it and deletes it.
Messages of a pair and tag arrive in the order they were sent, as torch requires. It suits
the small messages of control flow; pipelines that move activations should use a collective
backend with native point to point (NCCL on GPU), or Perseus collectives on a set of two."""

import collections
import datetime

import torch

from perseus.common.exceptions import InvalidArgumentError
from perseus.torch.distributed._work import PerseusWork


def _as_bytes(t):
    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


class _RecvWork(PerseusWork):
    def __init__(self, backend, tensor, key):
        super().__init__(backend, "recv", None, [tensor], self._fetch)
        self._tensor = tensor
        self._key = key

    def _fetch(self):
        store = self._backend._store
        try:
            store.wait([self._key], datetime.timedelta(seconds=self._backend.timeout_s))
        except Exception as e:  # noqa: BLE001 (the store's timeout, or a lost store)
            raise self._fail("no message arrived (%s); the sending rank must call send with "
                             "the same tag" % e) from e
        data = bytearray(store.get(self._key))
        store.delete_key(self._key)
        t = self._tensor
        got = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(
            0, dtype=torch.uint8)
        if got.numel() != t.numel() * t.element_size():
            raise self._fail("the message has %d bytes but the tensor holds %d; send and recv "
                             "tensors of the same shape and dtype"
                             % (got.numel(), t.numel() * t.element_size()))
        t.copy_(got.view(t.dtype).view(t.shape))



class PointToPoint:
    def __init__(self, backend):
        self._b = backend
        self._sent = collections.Counter()
        self._received = collections.Counter()

    def _peer(self, peer, what):
        if not 0 <= peer < self._b.size() or peer == self._b.rank():
            raise InvalidArgumentError("perseus: %s: rank %d is not another rank of this group "
                                       "of %d" % (what, peer, self._b.size()))

    def send(self, tensors, dst, tag):
        self._peer(dst, "send")
        me = self._b.rank()
        n = self._sent[(dst, tag)]
        self._sent[(dst, tag)] = n + 1
        self._b._store.set("p2p/%d/%d/%d/%d" % (me, dst, tag, n), _as_bytes(tensors[0]))
        return PerseusWork(self._b, "send", None, tensors)

    def recv(self, tensors, src, tag):
        self._peer(src, "recv")
        me = self._b.rank()
        n = self._received[(src, tag)]
        self._received[(src, tag)] = n + 1
        return _RecvWork(self._b, tensors[0], "p2p/%d/%d/%d/%d" % (src, me, tag, n))
