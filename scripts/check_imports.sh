#!/usr/bin/env bash
# Fails when a Python import crosses a layer the wrong way or closes a cycle (CI; scripts/test.sh
# runs it). The contracts live in pyproject.toml ([tool.importlinter]) and follow the layers of
# docs/design.md ("Python layers"):
#  - perseus.common is framework-neutral: it imports neither perseus.runner (the launcher) nor a
#    front end (perseus.torch, perseus.mxnet);
#  - the front ends, the launcher and the timeline tool never import one another; all of them
#    stand on perseus.common, which stands on perseus.rendezvous (what the launcher and its ranks
#    agree on);
#  - no two modules or packages of one package import each other, directly or through others.
# Imports inside functions count as much as those at the top of a module. It checks the source
# tree (python/), not an installed copy. Needs import-linter (scripts/setup.sh installs it).
# Usage: scripts/check_imports.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c '
import sys
from importlinter.cli import lint_imports_command
sys.exit(lint_imports_command())' --no-cache
