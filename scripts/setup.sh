#!/usr/bin/env bash
# Installs everything Perseus needs on a fresh Debian 12 machine: the toolchain, Open MPI,
# sshd (for the multi-host launcher tests), the Fashion-MNIST data, and the Python packages
# (MXNet 1.9.1 needs numpy < 1.24). Safe to run twice.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
apt_packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev
  openssh-server openssh-client iproute2 procps psmisc
  dataset-fashion-mnist
  clang libclang-rt-14-dev
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PYTHON=${PYTHON:-python3}
# torch's CUDA wheel also runs CPU-only; its nvidia-* dependencies are what `import torch` loads.
$PYTHON -m pip install -q --disable-pip-version-check \
  'numpy<1.24' 'mxnet==1.9.1' 'torch' 'setuptools>=77' \
  'pybind11>=2.11' 'scikit-build-core>=0.8' 'pytest>=7' 'pytest-timeout' 'matplotlib' 'cloudpickle'
