"""Names of unnamed collectives. Ranks must agree on every name, so an unnamed op gets
'<kind>.noname.<n>' from a counter per (kind, process set): ranks that issue the same sequence
of unnamed ops on a set get the same names, whatever they do on other sets."""

import collections
import threading

_lock = threading.Lock()
_counters = collections.Counter()


def op_name(kind, name, process_set_id=0):
    if name is not None:
        return str(name)
    with _lock:
        n = _counters[(kind, process_set_id)]
        _counters[(kind, process_set_id)] = n + 1
    suffix = "" if process_set_id == 0 else ".ps%d" % process_set_id
    return "%s.noname.%d%s" % (kind, n, suffix)
