#!/usr/bin/env bash
# Bit-exactness of the training loop against a reference build (not in ctest: it trains three
# small runs twice, a few minutes on one core).
#
#   tests/train/loop_bitexact.sh REFERENCE_SIMA_TRAIN NEW_SIMA_TRAIN [WORK_DIR]
#
# Runs (a) configs/quickstart.json (supervised), (b) configs/fmnist_dino_cvt_sima.json (DINO) and
# (c) configs/fmnist_distill_deit_sima.json (hard distillation from the reference binary's run
# (a) best.safetensors) with both binaries, one OpenMP thread and data.num_workers = 1, then
# (d) run (a) stopped by train.max_steps mid-epoch (a checkpoint_every save before it) and then
# resumed to the end, and (e) the same for DINO; then
# compares metrics.jsonl without its timing fields (img_per_s, epoch_seconds, epoch_cpu_seconds, eval_img_per_s)
# and the saved safetensors files byte for byte. Exits non-zero on the first difference.
set -euo pipefail
ref=$1
new=$2
work=${3:-$(mktemp -d)}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common=(--quiet --set data.num_workers=1)

train_both() {  # name, sima-train arguments...: runs both binaries into $work/{ref,new}/name
  local name=$1
  shift
  "$ref" --out "$work/ref/$name" "${common[@]}" "$@"
  "$new" --out "$work/new/$name" "${common[@]}" "$@"
}

run_case() {  # name, config, extra --set arguments...
  local name=$1 config=$2
  shift 2
  rm -rf "$work/ref/$name" "$work/new/$name"
  train_both "$name" --config "$config" "$@"
}

strip_timing() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("img_per_s", "epoch_seconds", "epoch_cpu_seconds", "eval_img_per_s"):
        r.pop(k, None)
    print(json.dumps(r, sort_keys=True))' "$1"
}

compare_case() {  # name, files...
  local name=$1
  shift
  if ! diff <(strip_timing "$work/ref/$name/metrics.jsonl") <(strip_timing "$work/new/$name/metrics.jsonl"); then
    echo "FAIL $name: metrics.jsonl differs"
    exit 1
  fi
  for f in "$@"; do
    if ! cmp "$work/ref/$name/$f" "$work/new/$name/$f"; then
      echo "FAIL $name: $f differs"
      exit 1
    fi
  done
  echo "ok   $name: metrics.jsonl ($(wc -l < "$work/new/$name/metrics.jsonl") records) and $* identical"
}

resume_case() {  # name, config, --set arguments...: stopped at step 5, then resumed
  local name=$1 config=$2
  shift 2
  run_case "$name" "$config" "$@" --set train.max_steps=5 --set train.checkpoint_every=3
  train_both "$name" --config "$config" --resume "$@" --set train.max_steps=0
}

supervised=(configs/quickstart.json --set data.train_subset=640 --set data.test_subset=200 --set train.epochs=2
            --set train.log_every=1 --set train.ema=true)
supervised_files=(model.safetensors best.safetensors model_ema.safetensors train_state.safetensors)
dino=(configs/fmnist_dino_cvt_sima.json --set data.batch_size=64 --set train.epochs=1 --set train.log_every=1)
dino_files=(model.safetensors student.safetensors train_state.safetensors)

run_case supervised "${supervised[@]}"
compare_case supervised "${supervised_files[@]}"

run_case dino "${dino[@]}" --set data.train_subset=256
compare_case dino "${dino_files[@]}"

run_case distill configs/fmnist_distill_deit_sima.json --set data.train_subset=256 --set data.test_subset=100 \
  --set data.batch_size=64 --set train.epochs=1 --set train.log_every=1 --set model.depth=2 \
  --set "distill.teacher=$work/ref/supervised/best.safetensors"
compare_case distill model.safetensors best.safetensors train_state.safetensors

resume_case supervised_resumed "${supervised[@]}"
compare_case supervised_resumed "${supervised_files[@]}"

resume_case dino_resumed "${dino[@]}" --set data.train_subset=512
compare_case dino_resumed "${dino_files[@]}"
echo "all identical ($work)"
