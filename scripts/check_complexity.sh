#!/usr/bin/env bash
# Fails when a function of the product is too long or too branchy to read as one step (CI;
# scripts/test.sh runs it): lizard over src/ and python/perseus/ (the tests and benchmarks
# live outside both), at most 100 lines and a cyclomatic complexity of 25 per function. A
# function over either limit is cut into named steps, not exempted: the check reads no
# whitelist (whitelizard.txt) and refuses `#lizard forgives` comments.
# Prints every offender.
# Usage: scripts/check_complexity.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh

MAX_LINES=100
MAX_CCN=25
SCOPE=(src python/perseus)

forgiven=$(git grep -nI 'lizard forgive' -- "${SCOPE[@]}" || true)
if [ -n "$forgiven" ]; then
  echo "$forgiven"
  echo "complexity: the lines above exempt a function; cut it into steps instead" >&2
  exit 1
fi

no_whitelist=$(mktemp)
trap 'rm -f "$no_whitelist"' EXIT
if ! offenders=$($PYTHON -m lizard --length "$MAX_LINES" --CCN "$MAX_CCN" --warnings_only \
    --whitelist "$no_whitelist" "${SCOPE[@]}"); then
  echo "$offenders"
  echo "$(printf '%s\n' "$offenders" | grep -c ': warning: ') function(s) over $MAX_LINES lines" \
    "or a cyclomatic complexity of $MAX_CCN: cut each into steps (scripts/check_complexity.sh)" >&2
  exit 1
fi
echo "complexity: every function is within $MAX_LINES lines and a complexity of $MAX_CCN"
