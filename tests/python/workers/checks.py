"""What the conformance workers share: expect() and the loop that runs their checks."""

import os
import sys
import tempfile


def expect(exc, fn, *args, **kwargs):
    """Calls fn and returns the `exc` it raised; fails if it raised nothing."""
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc.__name__))


def run_checks(checks, rank, size, settle):
    """Runs each check(rank, size) (only those named on the command line, if any), then
    settle() (a barrier), and prints 'PASS <check>'. CONFORMANCE_TMP is a private folder."""
    only = set(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CONFORMANCE_TMP", tmp)
        for check in checks:
            if only and check.__name__ not in only:
                continue
            check(rank, size)
            settle()
            print("PASS %s" % check.__name__, flush=True)
