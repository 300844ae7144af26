#!/usr/bin/env bash
# The main job: installs Perseus and trains the MNIST example on 2 ranks with perseusrun.
# Usage: scripts/run_mnist.sh [mxnet|torch] [extra example args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
framework=${1:-mxnet}; shift || true
$PYTHON -m pip install -q --disable-pip-version-check --no-build-isolation .
examples=$($PYTHON -c "import os, perseus; print(os.path.join(os.path.dirname(perseus.__file__), 'examples'))")
cd /tmp
exec $PYTHON -m perseus.runner -np 2 -H localhost:2 $PYTHON "$examples/${framework}_mnist.py" "$@"
