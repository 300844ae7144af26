"""--check-build and --params."""

import importlib.util
import subprocess
import sys

from perseus.common.basics import info_fields


def _core():
    from perseus import _core
    return _core


def check_build():
    """Prints what libperseus was built with and what this machine gives it at run time.
    Exits 1 when something the build supports is broken here (GPUs visible, no usable NCCL),
    so that a job script can stop before training."""
    try:
        core = _core()
        build = info_fields(core.build_info())
        runtime = info_fields(core.runtime_info())
    except ImportError as e:
        print("perseus._core could not be loaded: %s" % e)
        return 1
    print("Perseus v%s:" % build.get("version", "?"))
    print("\nAvailable Frameworks:")
    for name, label in (("torch", "PyTorch"), ("mxnet", "MXNet")):
        version = _version_of(name)
        print("    [%s] %s%s" % ("X" if version else " ", label, " " + version if version else ""))
    print("\nAvailable Controllers:")
    print("    [X] Perseus (authenticated TCP store)")
    print("    [%s] MPI" % ("X" if build.get("mpi") == "1" else " "))
    print("\nAvailable Tensor Operations:")
    gpu_built = build.get("cuda") == "1"
    loaded = runtime.get("nccl_loaded") == "1"
    print("    [X] CPU (shared memory + TCP)")
    print("    [%s] MPI" % ("X" if build.get("mpi") == "1" else " "))
    print("    [%s] NCCL" % ("X" if gpu_built and loaded else " "))
    print("\nGPU build:")
    if not gpu_built:
        print("    none: this build has no CUDA (nvcc or nccl.h was not found at build time);"
              " CPU tensors only")
        return 0
    print("    CUDA architectures: %s" % build.get("cuda_archs", "?"))
    print("    nccl.h at build time: %s" % _nccl_text(build.get("nccl", "0")))
    print("\nGPU run time:")
    print("    CUDA runtime %s, driver %s" % (_cuda_text(runtime.get("cuda_runtime")),
                                           _cuda_text(runtime.get("cuda_driver"))))
    gpus = int(runtime.get("gpus", "0") or 0)
    if gpus == 0:
        print("    GPUs: none visible (%s)" % runtime.get("cuda_error", "no device"))
    for d in range(gpus):
        name, _, arch = runtime.get("gpu%d" % d, "?:?").rpartition(":")
        print("    GPU %d: %s (%s)%s" % (d, name.replace("_", " "), arch,
                                         "" if _arch_covered(arch, build.get("cuda_archs", ""))
                                         else "  NOT COVERED by the built architectures"))
    if loaded:
        print("    libnccl: %s, version %s" % (runtime.get("nccl_path", "?"),
                                              _nccl_text(runtime.get("nccl_version", "0"))))
        under_torch = _runtime_after_torch()
        if under_torch.get("nccl_path") and under_torch["nccl_path"] != runtime.get("nccl_path"):
            # PyTorch loads its own wheel's NCCL first, and Perseus then uses that copy.
            print("    libnccl in a PyTorch process: %s, version %s" % (
                under_torch["nccl_path"], _nccl_text(under_torch.get("nccl_version", "0"))))
    else:
        print("    libnccl: NOT LOADED: %s" % runtime.get("nccl_error", "?"))
        if gpus > 0:
            print("\nCUDA tensors would fall back to the host-staged path; fix NCCL first.")
            return 1
    return 0


def _runtime_after_torch():
    """runtime_info() of a child that imported torch first ({} without torch)."""
    if importlib.util.find_spec("torch") is None:
        return {}
    code = "import torch\nfrom perseus import _core\nprint(_core.runtime_info())"
    result = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, timeout=120)
    lines = result.stdout.strip().splitlines()
    return info_fields(lines[-1]) if result.returncode == 0 and lines else {}


def _version_of(module):
    """The module's __version__, read in a child so a broken framework cannot hurt us; ''
    when it does not import."""
    if importlib.util.find_spec(module) is None:
        return ""
    result = subprocess.run([sys.executable, "-c", "import %s as m; print(m.__version__)" % module],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return result.stdout.strip().splitlines()[-1] if result.returncode == 0 and result.stdout.strip() else ""


def _nccl_text(code):
    code = int(code) if str(code).isdigit() else 0
    if code == 0:
        return "none"
    major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
    return "%d.%d.%d (%d)" % (major, rest // 100, rest % 100, code)


def _cuda_text(code):
    code = int(code) if str(code or "").isdigit() else 0
    return "%d.%d" % (code // 1000, code % 1000 // 10) if code else "none"


def _arch_covered(arch, built):
    """Whether a GPU of `arch` ('sm_90') runs this build: machine code for its own
    architecture, or PTX of an older one that the driver compiles."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        return False
    cc = int(arch[3:])
    for item in built.split(","):
        number, _, kind = item.partition("-")
        if not number.isdigit():
            continue
        if (kind == "real" and int(number) == cc) or (kind in ("virtual", "") and int(number) <= cc):
            return True
    return False


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
