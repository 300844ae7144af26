# Sourced by scripts/format.sh and scripts/check_format.sh: the C++, CUDA and C sources that
# .clang-format governs (tracked files only, so build trees and scratch files stay out), and the
# clang-format both use: clang-format-14, the version scripts/setup.sh installs, because
# another version formats some constructs differently and the check would disagree with it.
cpp_sources() {
  git ls-files -- 'src/*.h' 'src/*.cc' 'src/*.cu' 'src/*.cuh' 'include/*.h' \
    'tests/*.h' 'tests/*.cc' 'tests/*.c' 'bench/*.h' 'bench/*.cc' 'bench/*.c'
}
CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$CLANG_FORMAT" ]; then
  echo "clang-format-14 not found: run scripts/setup.sh (or set CLANG_FORMAT)" >&2
  exit 2
fi
