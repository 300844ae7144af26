# Sourced by the scripts here: picks the Python that Perseus is installed into. PYTHON wins
# when set; else the project's .venv, which scripts/setup.sh makes where the system's Python
# is externally managed (PEP 668: Debian 12+, Ubuntu 23.04+); else python3.
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python" ]; then
    PYTHON="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
  else
    PYTHON=python3
  fi
fi
export PYTHON
