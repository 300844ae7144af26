#!/usr/bin/env bash
# Fails when a C++ source is not formatted as .clang-format says (CI; scripts/test.sh runs it).
# Prints each offending line; scripts/format.sh fixes them all.
# Usage: scripts/check_format.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cpp_sources.sh
if ! cpp_sources | xargs -r "$CLANG_FORMAT" --dry-run -Werror --style=file; then
  echo "C++ sources are not clang-formatted: run scripts/format.sh and commit the result" >&2
  exit 1
fi
echo "clang-format: $(cpp_sources | wc -l) files clean"
