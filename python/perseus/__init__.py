"""Perseus: Horovod-compatible distributed training for PyTorch and MXNet.

`import perseus` is cheap: it loads no framework and no native code. Use the framework layers,
`perseus.torch` or `perseus.mxnet`, and start jobs with `perseusrun`. Runnable examples live in
the `examples/` folder next to this file.
"""

import os as _os

__version__ = "0.1.0"

# Development use: PERSEUS_BUILD_DIR names a CMake build dir (-DPERSEUS_BUILD_PYTHON=ON) whose
# _core extension is used when the package itself holds none (a source checkout).
_build_dir = _os.environ.get("PERSEUS_BUILD_DIR")
if _build_dir and not any(
        name.startswith("_core.") for name in _os.listdir(_os.path.dirname(__file__))):
    __path__.append(_build_dir)  # noqa: F821  (module __path__)
del _build_dir
