"""The native libraries keep their C++ runtime to themselves.

Some toolchains link libstdc++ statically (a GCC whose lib folder holds only libstdc++.a, or
-static-libstdc++). If such a copy exports its symbols, the dynamic loader binds part of them
to the libstdc++.so.6 that PyTorch loaded first and part to the private copy: two runtimes'
internals mixed in one object, which crashed the first collective (a locale facet looked up
by an id from one copy in the table of the other). So libperseus.so exports its C API alone
and _core its module entry alone, whatever the toolchain does; scripts/test.sh also runs this
file, and torch collectives, against a build made with -static-libstdc++."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perseus_test_support import run_worker

pytestmark = pytest.mark.timeout(200)


def _native_dir():
    """The folder whose libperseus.so and _core the tests load (a build dir or the package)."""
    if os.environ.get("PERSEUS_BUILD_DIR"):
        return Path(os.environ["PERSEUS_BUILD_DIR"])
    import perseus
    return Path(perseus.__file__).parent


def _defined_dynamic_symbols(path):
    out = subprocess.run(["readelf", "--dyn-syms", "--wide", str(path)], check=True,
                         capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[0].rstrip(":").isdigit() and fields[6] != "UND":
            names.append(fields[7].split("@")[0])
    return [n for n in names if n]


def _needs_readelf():
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")


@pytest.mark.parametrize("library, allowed", [
    ("libperseus.so", r"perseus_\w+"),
    ("_core.*.so", r"PyInit__core"),
])
def test_library_exports_only_its_interface(library, allowed):
    _needs_readelf()
    matches = sorted(_native_dir().glob(library))
    assert matches, "no %s in %s" % (library, _native_dir())
    for path in matches:
        extra = [n for n in _defined_dynamic_symbols(path) if not re.fullmatch(allowed, n)]
        assert not extra, "%s exports %d symbols beyond %s, e.g. %s: a C++ runtime linked into " \
            "it would interpose on the framework's (cmake/libperseus.map)" % (
                path.name, len(extra), allowed, extra[:8])


def test_torch_collectives_survive_every_dtype_and_error_path():
    """torch loads the system's libstdc++.so.6 before perseus loads: the mixed case."""
    pytest.importorskip("torch")
    out = run_worker(2, "torch_collectives.py", "quick").stdout
    assert out.count("PASS check_") == 2 * 10
    assert run_worker(2, "torch_errors.py").stdout.count("PASS errors") == 2


@pytest.mark.skipif(os.environ.get("PERSEUS_EXPECT_STATIC_LIBSTDCXX") != "1",
                    reason="only for scripts/test.sh's -static-libstdc++ build")
def test_static_build_carries_the_runtime_privately():
    """The build that scripts/test.sh makes with -static-libstdc++ really is one: its
    libperseus.so needs no libstdc++.so.6, so the tests above ran the mixed case."""
    _needs_readelf()
    for lib in [_native_dir() / "libperseus.so"] + sorted(_native_dir().glob("_core.*.so")):
        needed = subprocess.run(["readelf", "-d", str(lib)], check=True, capture_output=True,
                                text=True).stdout
        assert "libstdc++.so" not in needed, "%s still needs libstdc++.so.6" % lib
