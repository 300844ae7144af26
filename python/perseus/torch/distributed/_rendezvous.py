"""init_method="perseus://": rendezvous through Perseus's launcher detection.

Under mpirun, srun or perseusrun (no MASTER_ADDR needed), the engine forms the job first
through its own authenticated store (docs/launcher.md), then rank 0 opens the TCPStore that
torch's process groups need and the engine broadcasts its address to the other ranks."""

import datetime
import importlib
import socket

import torch
import torch.distributed as dist

from perseus.common import basics
from perseus.torch import _tensors as _t

SCHEME = "perseus"


def _store_address(rank, local_size, size):
    """(host, port) of rank 0's TCPStore, as every rank sees it."""
    msg = torch.zeros(256, dtype=torch.uint8)
    store = None
    if rank == 0:
        store = dist.TCPStore("0.0.0.0" if local_size < size else "127.0.0.1", 0, size, True,
                              timeout=_rendezvous_timeout, wait_for_workers=False)
        host = "127.0.0.1" if local_size == size else socket.gethostname()
        text = ("%s %d" % (host, store.port)).encode()
        msg[:len(text)] = torch.tensor(list(text), dtype=torch.uint8)
    basics.core().broadcast("perseus.rendezvous.store", _t.capsule(msg), None, 0, 0, 0, True)
    host, port = bytes(msg.tolist()).rstrip(b"\0").decode().split(" ")
    return store, host, int(port)


_rendezvous_timeout = datetime.timedelta(minutes=30)


def _handler(url, timeout=_rendezvous_timeout, **kwargs):
    from perseus.torch.distributed import _engine
    global _rendezvous_timeout
    _rendezvous_timeout = timeout
    _engine.start_from_launcher(timeout.total_seconds())
    topo = basics.topology()
    rank, size = topo["rank"], topo["size"]
    store, host, port = _store_address(rank, topo["local_size"], size)
    if store is None:
        store = dist.TCPStore(host, port, size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("perseus:// rendezvous is not restartable; call init_process_group again")


def install():
    try:
        # torch.distributed.rendezvous is also the name of a function there
        rdzv = importlib.import_module("torch.distributed.rendezvous")
        rdzv.register_rendezvous_handler(SCHEME, _handler)
    except RuntimeError:
        pass  # registered by an earlier import of this module


