#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/CMakeLists.txt, clang + ASan + UBSan), replays
# every saved crash under regressions/<harness>/, then fuzzes each harness for a fixed time
# from its seed corpus (corpus/<harness>/). Any finding fails: a crash, a sanitizer report,
# a leak, an exception other than sima::Error, an input running over 10 s, a single
# allocation over 1 GB or a process over 2 GB.
#
#   tests/fuzz/run.sh [seconds-per-harness] [harness...]     (default: 20 s, every harness)
#   SIMA_FUZZ_BUILD=dir   build folder (default: build/fuzz); ctest fuzz.readers sets it
#
# New inputs libFuzzer finds go to <build>/corpus/<harness>/, never into the source tree;
# a failing input is written to <build>/artifacts/ and its path printed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-20}"
shift || true
build="${SIMA_FUZZ_BUILD:-$root/build/fuzz}"
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(config idx cifar image safetensors checkpoint)

command -v clang++ >/dev/null || { echo "run.sh: clang++ not found (setup.sh installs clang)" >&2; exit 1; }
if [ ! -f "$build/CMakeCache.txt" ]; then
  CXX=clang++ cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=()
for h in "${harnesses[@]}"; do targets+=(--target "fuzz_$h"); done
echo "==> building ${harnesses[*]} in $build"
nice -n 10 cmake --build "$build" -j"$(nproc)" "${targets[@]}" > "$build/build.log" 2>&1 ||
  { tail -n 40 "$build/build.log"; echo "run.sh: the fuzz build failed ($build/build.log)" >&2; exit 1; }

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$here/ubsan.supp}"
limits=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10)

max_len() {  # inputs a little larger than the largest seed (CIFAR: three records)
  case "$1" in cifar) echo 9300 ;; checkpoint) echo 20000 ;; *) echo 4096 ;; esac
}
dict() {
  case "$1" in config) echo "-dict=$here/dict/config.dict" ;; safetensors | checkpoint) echo "-dict=$here/dict/safetensors.dict" ;; esac
}

status=0
for h in "${harnesses[@]}"; do
  bin="$build/fuzz_$h"
  mkdir -p "$build/artifacts" "$build/corpus/$h"
  # 1. the saved findings, each must now run clean
  if [ -d "$here/regressions/$h" ] && [ -n "$(ls -A "$here/regressions/$h")" ]; then
    n=$(ls "$here/regressions/$h" | wc -l)
    if "$bin" "${limits[@]}" -runs=1 "$here/regressions/$h"/* > "$build/replay_$h.log" 2>&1; then
      echo "==> $h: replayed $n saved finding(s): clean"
    else
      tail -n 40 "$build/replay_$h.log"
      echo "FAIL $h: a saved finding under tests/fuzz/regressions/$h fails again ($build/replay_$h.log)"
      status=1
      continue
    fi
  fi
  # 2. fuzz for a fixed time from the seeds (and what earlier runs in this build found)
  log="$build/fuzz_$h.log"
  if "$bin" "${limits[@]}" -max_total_time="$seconds" -max_len="$(max_len "$h")" $(dict "$h") \
      -artifact_prefix="$build/artifacts/$h-" -print_final_stats=1 \
      "$build/corpus/$h" "$here/corpus/$h" > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -E 's/.*(cov: [0-9]+).*(corp: [^ ]+).*/\1 \2/' || true)
    echo "==> $h: ${seconds} s, ${runs:-?} inputs, ${cov}, corpus $(ls "$build/corpus/$h" | wc -l) files"
  else
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|==[0-9]+==|error' "$log" | head -n 20 || tail -n 20 "$log"
    echo "FAIL $h: libFuzzer found an input that fails (log: $log)"
    status=1
  fi
done
exit $status
