"""Where user code waits for a collective, for the early stall diagnosis (PERSEUS_STALL_DIAGNOSIS).

Called by Handle.wait (src/python/handle.cc) only once a wait has lasted a slice, so nothing is
recorded per call: the site is that of the thread that waits, found by walking its frames."""
import os
import sys

_PERSEUS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _internal(filename):
    if filename.startswith(_PERSEUS_DIR) or filename.startswith("<"):
        return True
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None) if torch is not None else None
    return bool(torch_file) and filename.startswith(os.path.dirname(torch_file) + os.sep)


def caller_site():
    """'file:line' of the innermost frame outside perseus and torch, or '' if none."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _internal(filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
