"""pytest set-up for tests/python. The shared helpers live in perseus_test_support.py (not
here), because tests/python/framework_mxnet has a conftest of its own and two modules named
`conftest` cannot both be imported by name. No folder here takes a framework's name: pytest
puts tests/python on sys.path, and a folder `mxnet` would import as an empty namespace package
where MXNet is not installed (tests that need MXNet call require_mxnet())."""
import perseus_test_support  # noqa: F401  (puts the source tree on sys.path when needed)
