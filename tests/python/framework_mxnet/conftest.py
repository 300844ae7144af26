"""Shared set-up for the perseus.mxnet tests: the import path.

An installed perseus (pip install .) is used as is; otherwise the source tree's python/ is
put first (its _core comes from PERSEUS_BUILD_DIR, see python/perseus/__init__.py)."""
import importlib.util
import os
import sys

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_PY = os.path.join(_ROOT, "python")
if importlib.util.find_spec("perseus") is None and _PY not in sys.path:
    sys.path.insert(0, _PY)
