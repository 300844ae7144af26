"""Small helpers for perseusrun's messages."""


def count(n, noun):
    """'1 worker', '2 workers', '0 slots'."""
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def entry(key):
    """A blacklist entry as the user writes it: 'host' or 'host:slot'."""
    return "%s:%d" % key if isinstance(key, tuple) else str(key)
