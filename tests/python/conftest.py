"""pytest set-up for tests/python. The shared helpers live in perseus_test_support.py (not
here), because tests/python/framework_mxnet has a conftest of its own and two modules named
`conftest` cannot both be imported by name. No folder here may take a framework's name: pytest
puts tests/python on sys.path, and a folder `mxnet` would import as a namespace package where
MXNet is not installed, so importorskip("mxnet") would not skip."""
import perseus_test_support  # noqa: F401  (puts the source tree on sys.path when needed)
