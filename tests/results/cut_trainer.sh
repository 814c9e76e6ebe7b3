#!/bin/bash
# A stand-in for sima-train (tests/results/smoke.sh links it as sima-train in a folder of its own):
# the first run it starts is stopped with SIGTERM as soon as its training loop has begun
# (metrics.jsonl exists), as the end of a sitting stops it; later runs pass through. Every run gets
# 1024 training images so the stop lands mid-epoch.
#   SIMA_REAL_BIN=<build/bin> SIMA_CUT_MARKER=<file> cut_trainer.sh <sima-train arguments>
set -u
out=
prev=
for a in "$@"; do
  [ "$prev" = --out ] && out=$a
  prev=$a
done
[ -e "$SIMA_CUT_MARKER" ] && exec "$SIMA_REAL_BIN/sima-train" "$@" --set data.train_subset=1024
touch "$SIMA_CUT_MARKER"
"$SIMA_REAL_BIN/sima-train" "$@" --set data.train_subset=1024 &
pid=$!
until [ -e "$out/metrics.jsonl" ] || ! kill -0 $pid 2>/dev/null; do sleep 0.01; done
kill -TERM $pid
wait $pid
