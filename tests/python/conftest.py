"""pytest set-up for tests/python. The shared helpers live in perseus_test_support.py (not
here), because tests/python/mxnet has a conftest of its own and two modules named `conftest`
cannot both be imported by name."""
import perseus_test_support  # noqa: F401  (puts the source tree on sys.path when needed)
