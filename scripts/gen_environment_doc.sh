#!/usr/bin/env bash
# Regenerates the settings table of docs/environment.md from the registry (src/common/params.h).
# The same test, run without PERSEUS_UPDATE_DOCS, is CI's check that the two agree.
# Usage: scripts/gen_environment_doc.sh [build-dir]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
[ -f "$BUILD/build.ninja" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" -j "${JOBS:-$(nproc)}" common_params_doc_test
PERSEUS_UPDATE_DOCS=1 "$BUILD/tests/cpp/common_params_doc_test" --gtest_brief=1
git --no-pager diff --stat -- docs/environment.md
