#!/bin/bash
# results/reproduce.py end to end at a tiny budget (run --smoke: 1 epoch on 256 images):
# a final supervised row (claim 1), a fixed-budget row (claims 2-5: validation split, then the test
# set once), a DINO row with its k-NN and linear probe, the heatmap panels of both, the
# epoch sweeps of one supervised row and of DINO (judged by k-NN) on the validation split, a
# time-to-accuracy row, and the report from those records. Then a sweep point cut off by SIGTERM,
# parked (reproduce.py park), its run folder deleted as on a fresh machine, and resumed from the
# parked state by the next sweep.
# Checks that the script the paper table depends on works.
#   tests/results/smoke.sh BIN_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/bin}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export SIMA_BIN_DIR=$bin OMP_WAIT_POLICY=passive
py=python3
rows=e50_deit_sima,dino_xcit_sima
$py "$root/results/reproduce.py" run --smoke "$dir" --rows cvt_sima,$rows --seeds 0 --jobs 1
$py "$root/results/reproduce.py" run --smoke "$dir" --rows tta_deit_sima --jobs 1
$py "$root/results/reproduce.py" heatmaps --smoke "$dir" --rows $rows
# a row whose seed 0 has no finished record: its checkpoint (if any) is not the final one
mkdir -p "$dir/runs/xcit_sima_s0" && cp "$dir/runs/e50_deit_sima_s0/model.safetensors" "$dir/runs/xcit_sima_s0/"
$py "$root/results/reproduce.py" heatmaps --smoke "$dir" --rows xcit_sima | tee "$dir/heat_skip.txt"
$py "$root/results/reproduce.py" sweep --smoke "$dir" --rows cvt_sima,dino_xcit_sima --jobs 1
$py "$root/results/reproduce.py" report --records "$dir/records" --to "$dir/RESULTS.md"

fail() { echo "smoke.sh: $*" >&2; exit 1; }
# a DINO record's frozen-feature scores: its k-NN and linear probe, and both for init and pixels
baselines_ok='import json, sys; r = json.load(open(sys.argv[1])); b = r["baselines"]
assert all(b[f]["exit_code"] == 0 and b[f]["result"]["knn"] and "top1" in b[f]["result"]["linear_probe"]
           for f in ("init", "pixels")) and "linear_probe" in r["eval"]["result"], r'
# a final DINO row's teacher scored again with both class-attention tokens concatenated
blocks2_ok='import json, sys; r = json.load(open(sys.argv[1])); e2 = r.get("eval_blocks2") or {}
assert e2.get("exit_code") == 0 and "--feature-blocks 2" in e2["command"] and e2["result"]["feature_blocks"] == 2 \
    and "linear_probe" in e2["result"] and e2["result"]["eval_split"] == "test", r'
for r in e50_deit_sima dino_xcit_sima; do
  [ -f "$dir/records/$r/s0.json" ] || fail "no record for $r"
  [ -f "$dir/records/$r/heatmap.json" ] || fail "no heatmap record for $r"
  [ "$(ls "$dir/png/heatmaps/$r" | grep -c '_panel\.png$')" = 3 ] || fail "$r: not 3 panels"
done
grep -q '"exit_code": 0' "$dir/records/cvt_sima/s0.json" || fail "the final training run failed"
grep -q '"binary": "sima-train [0-9.]* (' "$dir/records/cvt_sima/s0.json" \
  || fail "the record does not name the binaries' version (sima-train --version)"
grep -q '"test_top1"' "$dir/records/cvt_sima/s0.json" || fail "the final run did not evaluate the test set"
for r in cvt_sima e50_deit_sima; do
  $py -c 'import json, sys; r = json.load(open(sys.argv[1])); s = r["sittings"]
assert len(s) == 1 and r["cpu_s"] == s[0]["cpu_s"] and s[0]["cpu"], r' "$dir/records/$r/s0.json" \
    || fail "the $r record does not carry its sitting's CPU"
done
fx=$dir/records/e50_deit_sima/s0.json
grep -q '"exit_code": 0' "$fx" || fail "the fixed-budget run failed"
grep -q '"val_top1"' "$fx" || fail "the fixed-budget run has no validation curve"
grep -q '"test_top1"' "$fx" && fail "the fixed-budget run's trainer read the test set"
grep -q '"top1"' "$fx" || fail "the fixed-budget run has no test top-1 from sima-eval"
$py -c 'import json, sys; r = json.load(open(sys.argv[1])); n = r["eval"]["count"]; h = r["correct_hex"]
assert len(h) == (n + 3) // 4, (len(h), n)
right = sum(bin(int(c, 16)).count("1") for c in h)
assert abs(100.0 * right / n - r["top1"]) < 1e-6, (right, n, r["top1"])' "$fx" \
  || fail "the fixed-budget record has no per-image correctness (correct_hex) matching its top-1"
grep -q '"split": "validation"' "$fx" || fail "the fixed-budget run did not train on the validation split"
[ -f "$dir/png/e50_deit_sima.png" ] || fail "the fixed-budget run's seed-0 curves were not kept"
$py -c "$baselines_ok" "$dir/records/dino_xcit_sima/s0.json" \
  || fail "the DINO record lacks its linear probe or the random-init and pixel baselines on the test set"
$py -c "$blocks2_ok" "$dir/records/dino_xcit_sima/s0.json" \
  || fail "the DINO record lacks its teacher's scores with both class-attention tokens (--feature-blocks 2) on the test set"
grep -q '^# Claim 7 in full' "$dir/results/speed.md" || fail "the report wrote no speed page beside RESULTS.md"
grep -q '](results/speed.md)' "$dir/RESULTS.md" || fail "RESULTS.md does not link its speed page"
grep -q '^| raw pixels | [0-9.]* / [0-9.]* / [0-9.]* | [0-9.]* | — | — |' "$dir/RESULTS.md" \
  || fail "the claim-6 table has no pixel baseline"
grep -q '^| DeiT SimA | [0-9.]* (1 of 3 seeds) | not run |' "$dir/RESULTS.md" || fail "the report has no claim 3 row"
grep -q '^| cvt | softmax | not run | [0-9.]* (1 of 3 seeds) |' "$dir/RESULTS.md" || fail "the report has no claim 1 row"
for e in 1 2; do
  [ -f "$dir/records/sweeps/cvt_sima_e$e.json" ] || fail "no sweep record cvt_sima_e$e"
done
grep -q '"val_top1"' "$dir/records/sweeps/cvt_sima_e2.json" || fail "the sweep record has no validation top-1"
grep -q '"test_top1"' "$dir/records/sweeps/cvt_sima_e2.json" && fail "the sweep record read the test set"
grep -q '^| cvt_sima | 2 | ' "$dir/RESULTS.md" || fail "the report has no sweep row"
dsweep=$dir/records/sweeps/dino_xcit_sima_e2.json
[ -f "$dsweep" ] || fail "no DINO sweep record"
grep -q '"eval_split": "validation"' "$dsweep" || fail "the DINO sweep's k-NN did not score the validation split"
grep -q '"val_top1"' "$dsweep" || fail "the DINO sweep record has no 20-NN top-1"
$py -c "$baselines_ok" "$dsweep" || fail "the DINO sweep record lacks its linear probe or the random-init and pixel baselines"
grep -q '^dino_xcit_sima at 2 epochs: .* freshly initialised .*; linear probe ' "$dir/RESULTS.md" \
  || fail "the report has no DINO baselines"
grep -q '^| dino_xcit_sima | 2 | [0-9.]* | — (20-NN at the end) |' "$dir/RESULTS.md" || fail "the report has no DINO sweep row"
tta=$dir/records/tta_deit_sima/s0.json
[ -f "$tta" ] || fail "no time-to-accuracy record"
[ -f "$dir/records/tta_deit_sima/s1.json" ] || fail "no second timing round (tta.ROUNDS)"
grep -q '"val_top1"' "$tta" || fail "the time-to-accuracy record has no validation top-1"
grep -q '"test_top1"' "$tta" && fail "the time-to-accuracy run read the test set"
grep -q '"threads": 2' "$tta" || fail "the time-to-accuracy run did not run at 2 threads"
grep -q '^| SimA (ℓ1) | [0-9.]* s ([0-9.]*–[0-9.]*) | [0-9]* | ' "$dir/RESULTS.md" || fail "the report has no time-to-accuracy row with its epochs' range"
grep -q "^\*\*dino_xcit_sima\*\*, from seed 0's final run (1 epoch)\. Layer" "$dir/RESULTS.md" \
  || fail "the report has no heatmap panels from seed 0's run"
grep -q "xcit_sima: seed 0 has no finished record yet" "$dir/heat_skip.txt" || fail "heatmaps drew a row with no finished seed 0"
[ -e "$dir/records/xcit_sima/heatmap.json" ] && fail "heatmaps recorded a row with no finished seed 0"

# Cut off, parked, resumed elsewhere: cut_trainer.sh stops the first run with SIGTERM mid-epoch.
wrap=$dir/wrapbin
mkdir -p "$wrap"
ln -s "$bin/sima-eval" "$bin/sima-bench" "$wrap/"
ln -s "$root/tests/results/cut_trainer.sh" "$wrap/sima-train"
export SIMA_REAL_BIN=$bin SIMA_CUT_MARKER=$dir/cut
point=$dir/runs/sweep_deit_sima_e1
SIMA_BIN_DIR=$wrap $py "$root/results/reproduce.py" sweep --smoke "$dir" --rows deit_sima --jobs 1 | tee "$dir/cut.txt"
grep -q "deit_sima 1 epochs: interrupted" "$dir/cut.txt" || fail "the cut-off sweep point was not reported as interrupted"
[ -f "$dir/records/sweeps/deit_sima_e1.json" ] && fail "a cut-off sweep point got a record"
$py "$root/results/reproduce.py" park --smoke "$dir" sweep_no_such_run | grep -q "parked 0 " || fail "park parked a run it was not given"
$py "$root/results/reproduce.py" park --smoke "$dir"
parked=$dir/records/parked/sweep_deit_sima_e1
# (states and weights parked gzip-compressed: results/parked.py)
for f in train_state.safetensors.gz config.json metrics.jsonl spent.json; do
  [ -f "$parked/$f" ] || fail "park did not keep $f"
done
[ -e "$dir/records/parked/sweep_cvt_sima_e2" ] && fail "park kept a finished run"
rm -rf "$point" "$point.spent.json"  # a fresh machine: only the records (and the parked state) remain
SIMA_BIN_DIR=$wrap $py "$root/results/reproduce.py" sweep --smoke "$dir" --rows deit_sima --jobs 1
rec=$dir/records/sweeps/deit_sima_e1.json
[ -f "$rec" ] || fail "the parked sweep point did not finish"
[ -f "$point.resume.log" ] || fail "the parked sweep point started over instead of resuming"
$py -c 'import json, sys; s = json.load(open(sys.argv[1]))["sittings"]
assert len(s) == 2 and not s[0]["resumed"] and s[1]["resumed"] and all(x["cpu"] for x in s), s' "$rec" \
  || fail "the record does not carry both sittings, each with its CPU"
[ -e "$parked" ] && fail "the parked copy outlived its record"
echo "smoke.sh: reproduce.py run, heatmaps, report, and park/resume work"
