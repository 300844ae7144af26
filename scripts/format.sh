#!/usr/bin/env bash
# Formats every C++ source in place with the repository's .clang-format.
# Usage: scripts/format.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cpp_sources.sh
cpp_sources | xargs -r "$CLANG_FORMAT" -i --style=file
echo "formatted $(cpp_sources | wc -l) files with $("$CLANG_FORMAT" --version)"
