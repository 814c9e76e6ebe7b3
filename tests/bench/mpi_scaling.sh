#!/usr/bin/env bash
# Scaling of sima-train from 1 to 2 MPI ranks on this machine (train/distributed/distributed.h), one
# OpenMP thread per rank, the same global batch: images/s, the communication share of a step
# and the bytes all-reduced per step. Rounds alternate 1 rank / 2 ranks, because the machine
# is shared and noisy. Run from the repository root after ./setup.sh:
#
#   tests/bench/mpi_scaling.sh [ROUNDS=3] [STEPS=60] [CONFIG=configs/quickstart.json]
#
# img/s is the mean of the metrics.jsonl step records after the first 10 steps (warm-up);
# cpu_s the user + system CPU seconds of the whole run (every rank), which does not depend on
# how busy the machine is: when other jobs share the cores, wall-clock img/s cannot show the
# scaling, but equal cpu_s for 1 and 2 ranks means 2 idle cores would run 2 ranks ~2x faster.
set -euo pipefail
ROUNDS=${1:-3}
STEPS=${2:-60}
CONFIG=${3:-configs/quickstart.json}
BIN=build/bin/sima-train
OUT=$(mktemp -d /tmp/sima_mpi_scaling.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
COMMON=(--config "$CONFIG" --set data.train_subset=8192 --set data.num_workers=1 --set train.log_every=10
        --set "train.max_steps=$STEPS" --quiet)

img_per_s() {  # mean img/s of the step records after step 10
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
v = [x["img_per_s"] for x in r if x.get("kind") == "step" and x["step"] > 10]
print(f"{sum(v) / len(v):.1f}")
PY
}

echo "config $CONFIG, $STEPS steps, global batch from the config, OMP_NUM_THREADS=1, $(nproc --all) cores, load average $(cut -d" " -f1-3 /proc/loadavg)"
TIMEFORMAT='%U %S'
cpu() { awk '{printf "%.1f", $1 + $2}' "$1"; }
printf "%-6s %-6s %10s %14s %10s %10s %10s %8s\n" round ranks img/s bytes/step wait_s sync_s train_s cpu_s
for r in $(seq 1 "$ROUNDS"); do
  { time "$BIN" "${COMMON[@]}" --out "$OUT/r$r-1" > "$OUT/r$r-1.log"; } 2> "$OUT/r$r-1.time"
  printf "%-6s %-6s %10s %14s %10s %10s %10s %8s\n" "$r" 1 "$(img_per_s "$OUT/r$r-1")" - - - \
    "$(sed -n 's/.* in \([0-9.]*\) s;.*/\1/p' "$OUT/r$r-1.log")" "$(cpu "$OUT/r$r-1.time")"
  { time mpirun -np 2 --oversubscribe --bind-to none "$BIN" "${COMMON[@]}" --out "$OUT/r$r-2" > "$OUT/r$r-2.log"; } \
    2> "$OUT/r$r-2.time"
  # "allreduce: B bytes per step in K buckets; W s waited after backward, S s in sync in total, of T s"
  read -r bytes wait sync total < <(sed -n 's/^allreduce: \([0-9]*\) bytes .*; \([0-9.]*\) s waited.*, \([0-9.]*\) s in sync.*of \([0-9.]*\) s$/\1 \2 \3 \4/p' "$OUT/r$r-2.log")
  printf "%-6s %-6s %10s %14s %10s %10s %10s %8s\n" "$r" 2 "$(img_per_s "$OUT/r$r-2")" "$bytes" "$wait" "$sync" "$total" \
    "$(cpu "$OUT/r$r-2.time")"
done
