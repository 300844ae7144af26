#!/usr/bin/env bash
# Builds Horovod 0.28.1 from its PyPI sdist with Gloo, PyTorch and MXNet support, for the peer
# benchmarks, and caches the wheel in ~/.cache/perseus-wheels (later runs install from there).
#
# Why a patch: Horovod 0.28.1 compiles its PyTorch extension as C++14/17, but the headers of
# current PyTorch (2.x from PyPI, 2.15 here) need C++20 (std::bit_width, std::strong_ordering).
# The only change is CMAKE_CXX_STANDARD 20 in horovod/torch/CMakeLists.txt and 17 at the top.
# On 2 cores the build takes about 30 minutes.
set -euo pipefail
CACHE=${HOROVOD_WHEEL_CACHE:-$HOME/.cache/perseus-wheels}
mkdir -p "$CACHE"
if ls "$CACHE"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
  exec python3 -m pip install -q --no-deps "$CACHE"/horovod-0.28.1-*.whl
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -m pip download -q --no-deps --no-binary :all: horovod==0.28.1 -d .
tar xzf horovod-0.28.1.tar.gz
cd horovod-0.28.1
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' CMakeLists.txt
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 20)/' horovod/torch/CMakeLists.txt
HOROVOD_WITH_GLOO=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j"$(nproc)" \
  python3 -m pip wheel --no-deps --no-build-isolation -w "$CACHE" .
python3 -m pip install -q --no-deps "$CACHE"/horovod-0.28.1-*.whl cloudpickle psutil pyyaml
