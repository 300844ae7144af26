#!/usr/bin/env bash
# Fails when a direct #include crosses a layer the wrong way (CI; scripts/test.sh runs it).
# The rules follow the tree of src/ (docs/design.md, "Parts and seams"):
#  - the post lane has one door: only engine/engine.cc (which builds it) and engine/posted/
#    include engine/posted/posted_collectives.h; every other part sees engine/fast_path.h.
#  - negotiation/ is the protocol as a pure layer and fusion/ plans buffers from requests:
#    neither includes anything under engine/.
#  - engine/cycle/ and engine/exec/ are parts that the facade and the driver hold: they never
#    include engine/engine.h or engine/driver.h, so a part cannot reach back into its owner.
# Prints every offending line.
# Usage: scripts/check_includes.sh
set -euo pipefail
cd "$(dirname "$0")/.."

violations=0
# forbid <folder> <regex of included paths> <why>
forbid() {
  local folder=$1 included=$2 why=$3 hits
  hits=$(git ls-files -- "$folder" | grep -E '\.(h|cc|cu|cuh)$' |
    xargs -r grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($included)\"" || true)
  if [ -n "$hits" ]; then
    echo "$hits"
    echo "  ^ $why" >&2
    violations=$((violations + $(printf '%s\n' "$hits" | wc -l)))
  fi
}

# The files of src/ outside the allowed ones that include `included`.
only_from() {
  local included=$1 allowed=$2 why=$3 hits
  hits=$(git ls-files -- src | grep -E '\.(h|cc|cu|cuh)$' | grep -vE "^($allowed)" |
    xargs -r grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$included\"" || true)
  if [ -n "$hits" ]; then
    echo "$hits"
    echo "  ^ $why" >&2
    violations=$((violations + $(printf '%s\n' "$hits" | wc -l)))
  fi
}

only_from 'engine/posted/posted_collectives\.h' 'src/engine/engine\.cc$|src/engine/posted/' \
  "the post lane's one door is engine/fast_path.h: include that"
forbid src/negotiation 'engine/[^"]*' "negotiation/ is a pure layer: it must not include engine/"
forbid src/fusion 'engine/[^"]*' "fusion/ must not include engine/ (use negotiation/request.h)"
forbid src/engine/cycle 'engine/(engine|driver)\.h' "engine/cycle/ must not include its owners"
forbid src/engine/exec 'engine/(engine|driver)\.h' "engine/exec/ must not include its owners"

if [ "$violations" -gt 0 ]; then
  echo "$violations #include(s) cross a layer the wrong way (rules: scripts/check_includes.sh)" >&2
  exit 1
fi
echo "includes: layer rules hold"
