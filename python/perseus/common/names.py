"""Names of unnamed collectives. Ranks must agree on every name.

An unnamed asynchronous op gets '<kind>.noname.<n>' from a counter per (kind, process set):
ranks that issue the same sequence of unnamed ops on a set get the same names, whatever they do
on other sets.

An unnamed blocking call (allreduce_, allreduce, broadcast_, broadcast, allgather, alltoall,
reducescatter) gets one fixed name per (kind, reduce op, process set), '<kind>.noname' with the
op's suffix where it is not Average ('allreduce.noname.sum'). A thread has at most one blocking
call in flight, so the i-th such call pairs with the i-th on every rank as the counter's names
would; and the name repeats, so the engine treats it as a named call (its response cached from
the second call, posted from the third), where a fresh name per call would be negotiated in
full every time, many times a small collective's own cost. The op is in the name because a loop
often averages a loss and sums a count: a name that changes its shape, dtype or op is
negotiated again, and after a few changes stays negotiated. Two threads of one rank in unnamed
blocking calls of one kind, op and set at once get DuplicateNameError; with the counter they
could pair differently on different ranks."""

import itertools
import threading

from perseus.common.ops import Adasum, Max, Min, Product, Sum

_lock = threading.Lock()  # only to create a counter; next() on one is atomic under the GIL
_counters = {}


def _counter(key):
    with _lock:
        return _counters.setdefault(key, itertools.count())


def op_name(kind, name, process_set_id=0):
    if name is not None:
        return str(name)
    key = (kind, process_set_id)
    counter = _counters.get(key) or _counter(key)
    n = next(counter)
    if process_set_id == 0:
        return "%s.noname.%d" % (kind, n)
    return "%s.noname.%d.ps%d" % (kind, n, process_set_id)


_OP_SUFFIX = {Sum: ".sum", Adasum: ".adasum", Min: ".min", Max: ".max", Product: ".product"}


def blocking_name(kind, process_set_id=0, op=None):
    """The name of an unnamed blocking call of `kind` with reduce op `op` (None or Average:
    none) on the set (module doc)."""
    try:
        name = kind + ".noname" + _OP_SUFFIX.get(op, "")
    except TypeError:  # an unhashable op: the call reports it
        name = kind + ".noname"
    return name if process_set_id == 0 else "%s.ps%d" % (name, process_set_id)
