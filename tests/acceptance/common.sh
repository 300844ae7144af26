# Sourced by the acceptance scripts here: the Python to use, and a Perseus it can import (the
# installed package, or this checkout's python/ with the build in PERSEUS_BUILD_DIR).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/scripts/python-env.sh"
if [ -n "${PERSEUS_BUILD_DIR:-}" ]; then
  export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
fi
$PYTHON -c "import perseus._core" || {
  echo "acceptance: Perseus cannot be imported: install it (pip install .) or set" \
       "PERSEUS_BUILD_DIR to a build with -DPERSEUS_BUILD_PYTHON=ON" >&2
  exit 2
}
EXAMPLES="$ROOT/python/perseus/examples"

# horovodrun 0.28.1 as the user runs it; HOROVOD_PYTHONPATH adds a horovod installed with
# `pip install --target` to its path (only horovodrun's: the ranks import perseus). HOROVODRUN
# names another command to run in its place, for a machine where Horovod could not be built:
# HOROVODRUN="$PYTHON tests/python/launchers/horovodrun_unbuilt.py" with HOROVOD_PYTHONPATH at
# Horovod's unpacked source is horovodrun's own code without its build check (as in CI).
horovodrun() {
  PYTHONPATH="${HOROVOD_PYTHONPATH:+$HOROVOD_PYTHONPATH:}${PYTHONPATH:-}" \
    ${HOROVODRUN:-$PYTHON -m horovod.runner.launch} "$@"  # -m: what the entry point runs
}

require_horovodrun() {
  [ -n "${HOROVODRUN:-}" ] && return 0
  if ! PYTHONPATH="${HOROVOD_PYTHONPATH:+$HOROVOD_PYTHONPATH:}${PYTHONPATH:-}" \
      $PYTHON -c "import horovod.torch" 2>/dev/null; then
    echo "acceptance: horovodrun (Horovod 0.28.1 with its PyTorch extension) is not installed;" \
         "bench/peers/build_horovod.sh builds it, or set HOROVOD_PYTHONPATH to a pip --target" \
         "install" >&2
    exit 2
  fi
}
