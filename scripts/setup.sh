#!/usr/bin/env bash
# Installs everything Perseus needs on a fresh Debian 12 machine: the toolchain, Open MPI,
# sshd (for the multi-host launcher tests), Slurm, munge, MPICH and Intel MPI's runtime (for
# the tests of those launchers; Open MPI stays the default MPI), the Fashion-MNIST data, and the
# Python packages (MXNet 1.9.1 needs numpy < 1.24). Safe to run twice.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
apt_packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev
  openssh-server openssh-client iproute2 procps psmisc util-linux
  # The launcher tests start these themselves (tests/python/launchers): a real Slurm on the
  # network-namespace hosts, and MPICH's Hydra mpiexec, called as /usr/bin/mpiexec.mpich.
  slurmctld slurmd slurm-client munge mpich
  dataset-fashion-mnist
  clang libclang-rt-14-dev clang-format-14
  python3-venv
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# mpich registers mpirun/mpicc alternatives too; Open MPI must stay the default (perseusrun
# --mpi, the MPI data plane and CMake's FindMPI use it).
for alt in mpirun:/usr/bin/mpirun.openmpi mpi:/usr/bin/mpicc.openmpi; do
  name=${alt%%:*}
  target=${alt#*:}
  if [ -e "$target" ] && [ "$(readlink -f "/etc/alternatives/$name")" != "$(readlink -f "$target")" ]; then
    $SUDO update-alternatives --set "$name" "$target"
  fi
done

cd "$(dirname "$0")/.."
# A system Python that PEP 668 marks externally managed (Debian's and Ubuntu's own python3)
# refuses pip installs: then everything goes into the project's .venv, which the other scripts
# pick up (scripts/python-env.sh). Any other interpreter (a pyenv, conda or venv one, or
# PYTHON=...) is used as it is.
if [ -z "${PYTHON:-}" ] && [ ! -x .venv/bin/python ] && python3 -c '
import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and sys.prefix == sys.base_prefix else 1)'; then
  echo "setup.sh: python3 is externally managed (PEP 668): installing into $PWD/.venv"
  python3 -m venv .venv
fi
source scripts/python-env.sh
# torch's CUDA wheel also runs CPU-only; its nvidia-* dependencies are what `import torch` loads.
$PYTHON -m pip install -q --disable-pip-version-check \
  'numpy<1.24' 'mxnet==1.9.1' 'torch' 'setuptools>=77' \
  'pybind11>=2.11' 'scikit-build-core>=0.8' 'pytest>=7' 'pytest-timeout' 'matplotlib' 'cloudpickle' 'pyyaml' \
  'lizard' 'import-linter>=2.17' 'psutil'

# horovodrun 0.28.1's runner for tests/python/launchers/test_horovodrun.py: the horovod/ package
# of its source distribution (3.5 MB), unbuilt (building a framework extension takes about 30
# minutes; horovodrun_unbuilt.py says what that skips). Its runner needs cloudpickle, psutil and
# pyyaml, installed above.
HOROVOD_SRC=${PERSEUS_HOROVOD_SRC:-/opt/horovod-0.28.1}
if [ ! -f "$HOROVOD_SRC/horovod/runner/launch.py" ]; then
  sdist=$(mktemp -d)
  $PYTHON -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    'horovod==0.28.1' -d "$sdist"
  $SUDO mkdir -p "$HOROVOD_SRC"
  $SUDO tar xzf "$sdist/horovod-0.28.1.tar.gz" -C "$HOROVOD_SRC" --strip-components=1 \
    horovod-0.28.1/horovod
  rm -rf "$sdist"
fi

# Intel MPI's Hydra for the launcher tests (tests/python/launchers): PyPI's impi-rt (a 129 MB
# wheel) under a prefix of its own, so that its mpirun/mpiexec do not shadow Open MPI's; the
# tests call $PERSEUS_IMPI_PREFIX/bin/mpiexec.hydra by its path. --no-deps: the ranks use only
# Hydra's PMI, not Intel's libmpi, so libfabric is not needed.
IMPI_PREFIX=${PERSEUS_IMPI_PREFIX:-/opt/impi}
if [ ! -x "$IMPI_PREFIX/bin/mpiexec.hydra" ]; then
  $SUDO "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --prefix "$IMPI_PREFIX" \
    'impi-rt==2021.19.0'
fi
