#!/usr/bin/env bash
# Configures the sanitizer build that tests/sanitize/run.sh and tests/fuzz/run.sh share: the
# repository root with clang and SIMA_SANITIZE=ON (ASan + UBSan; sima_base also carries
# libFuzzer's coverage counters, and tests/fuzz adds the harnesses). One library build serves both
# the sanitized core/nn/data tests and the fuzzers.
#
#   tests/sanitize/configure.sh [build dir]     (default: build-asan/ next to build/)
#
# A folder configured before with another compiler (gcc's build-asan/ of older versions) is
# refused with what to do, never reconfigured in place.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$src/build-asan}"
command -v clang++ >/dev/null || { echo "configure.sh: clang++ not found (setup.sh installs clang)" >&2; exit 1; }
cache="$dir/CMakeCache.txt"
if [ -f "$cache" ] && ! grep -q '^CMAKE_CXX_COMPILER_ID:.*=Clang$\|^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache"; then
  echo "configure.sh: $dir was configured with another compiler ($(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")); the sanitizer build needs clang++: remove $dir and run again" >&2
  exit 1
fi
CXX=clang++ cmake -S "$src" -B "$dir" -DSIMA_SANITIZE=ON >/dev/null
