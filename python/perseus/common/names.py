"""Names of unnamed collectives. Ranks must agree on every name, so an unnamed op gets
'<kind>.noname.<n>' from a counter per (kind, process set): ranks that issue the same sequence
of unnamed ops on a set get the same names, whatever they do on other sets."""

import itertools
import threading

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
