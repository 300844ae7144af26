"""Small helpers for perseusrun's messages."""

import time


def count(n, noun):
    """'1 worker', '2 workers', '0 slots'."""
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def entry(key):
    """A blacklist entry as the user writes it: 'host' or 'host:slot'."""
    return "%s:%d" % key if isinstance(key, tuple) else str(key)


class Throttle:
    """A repeated warning: the first `burst` of each `window_s` are printed, the rest counted,
    and the next one printed after the window says how many were left out."""

    def __init__(self, log, burst=3, window_s=60.0, clock=time.monotonic):
        self._log, self._burst, self._window, self._clock = log, burst, window_s, clock
        self._start = None
        self._logged = 0
        self._held = 0

    def __call__(self, message):
        now = self._clock()
        note = ""
        if self._start is None or now - self._start >= self._window:
            if self._held:
                note = " (and %d more like it in the last %.0f s)" % (self._held,
                                                                      now - self._start)
            self._start, self._logged, self._held = now, 0, 0
        if self._logged < self._burst:
            self._logged += 1
            self._log(message + note)
        else:
            self._held += 1
