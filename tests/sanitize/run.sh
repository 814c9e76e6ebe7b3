#!/usr/bin/env bash
# The core/, nn/ and data/ tests under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   tests/sanitize/run.sh [build dir]     (default: build-asan/ next to build/)
#
# Configures the build dir (tests/sanitize/configure.sh: clang, SIMA_SANITIZE=ON; only sima_base
# and the core/nn/data tests are in its default target, the fuzz harnesses share its library),
# builds it and runs `ctest -L 'core|nn|data'` with strict sanitizer options: any ASan report,
# UBSan report or leak aborts the test and fails it. ctest runs it from build/ as
# `sanitize.core_nn_data`, and fuzz.readers uses the same folder.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$src/build-asan}"
jobs="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc alone obeys OMP_NUM_THREADS

"$src/tests/sanitize/configure.sh" "$dir"
cmake --build "$dir" -j"$jobs"

# detect_leaks: LeakSanitizer at exit. abort_on_error: a report ends the test with SIGABRT.
# strict_string_checks, detect_stack_use_after_return, check_initialization_order and
# strict_init_order turn on checks that are off by default.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$src/tests/fuzz/ubsan.supp"
export LSAN_OPTIONS="suppressions=$src/tests/sanitize/lsan.supp:print_suppressions=0"
# OpenMP under ASan: two threads, so the parallel paths run too (the tests set the same).
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive

ctest --test-dir "$dir" -L 'core|nn|data' -j"$jobs" --output-on-failure
