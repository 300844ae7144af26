"""--check-build and --params."""

import importlib.util
import subprocess
import sys


def _core():
    from perseus import _core
    return _core


def check_build():
    try:
        info = _core().build_info()
    except ImportError as e:
        print("perseus._core could not be loaded: %s" % e)
        return 1
    fields = dict(item.split("=", 1) for item in info.split() if "=" in item)
    print("Perseus v%s:" % fields.get("version", "?"))
    print("\nAvailable Frameworks:")
    for name in ("torch", "mxnet"):
        print("    [%s] %s" % ("X" if _imports(name) else " ", "PyTorch" if name == "torch" else "MXNet"))
    print("\nAvailable Data Planes:")
    labels = [("cpu", "CPU (shared memory + TCP)"), ("mpi", "MPI"), ("cuda", "CUDA"),
              ("nccl", "NCCL")]
    for key, label in labels:
        print("    [%s] %s" % ("X" if fields.get(key, "0") not in ("0", "") else " ", label))
    print("\nBuild info: %s" % info)
    return 0


def _imports(module):
    """Whether `module` imports, checked in a child so a broken framework cannot hurt us."""
    if importlib.util.find_spec(module) is None:
        return False
    result = subprocess.run([sys.executable, "-c", "import %s" % module],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return result.returncode == 0


def print_params():
    try:
        dump = _core().params_dump()
    except ImportError as e:
        print("perseus._core could not be loaded: %s" % e)
        return 1
    except ValueError as e:  # a PERSEUS_* variable that does not parse
        print("perseusrun: %s" % e, file=sys.stderr)
        return 2
    rows = [line.split("\t") for line in dump.splitlines() if line.strip()]
    for row in rows:
        name_value = row[0]
        default = row[1] if len(row) > 1 else ""
        doc = row[2] if len(row) > 2 else ""
        print("%s  (default: %s)\n    %s" % (name_value, default, doc))
    return 0
