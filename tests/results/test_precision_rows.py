#!/usr/bin/env python3
"""The precision rows (results/precision_rows.py) and their report sections (results/report_precision.py):
the rows are declared with their precision, seeds and the float32 row's recipe; a run's record says its
precision, a float16 run's record keeps its loss scaler and a divergence (a fake trainer stands in for
sima-train); the claim-4 float16 section reads toy records (diverged, skipped steps, finished, below
chance); the bf16 section's verdict on toy pairs of records; the quickstart's bf16 section
(results/quickstart_precision.py) on toy records, equivalent and not; the "Every run" table's precision column;
the CPU projection counts the new rows."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_bin  # noqa: E402  (tests/results/fake_bin.py)
import fixed  # noqa: E402
import precision_rows  # noqa: E402
import quickstart_precision as qp  # noqa: E402
import report  # noqa: E402
import report_precision as rp  # noqa: E402
import report_protocol  # noqa: E402
import reproduce  # noqa: E402
import sweep  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


# The rows: claim 4's three XCiT rows at fp16 (>= 2 seeds, 50 epochs, the float32 row's config) and
# claim 1's CvT SimA at bf16 with cvt_sima's 3 seeds.
want = {"fp16_e50_xcit_sima": "xcit_sima", "fp16_e50_xcit_sima_l2": "xcit_sima_l2",
        "fp16_e50_xcit_sima_nonorm": "xcit_sima_nonorm"}
for row, config in want.items():
    r = reproduce.ROW.get(row)
    check(r is not None and r[2] == "fixed" and r[3] >= 2 and 4 in r[1], "fp16 row %s: %r" % (row, r))
    check(reproduce.config_path(row) == reproduce.config_path("e50_" + config) and fixed.epochs_of(row) == 50
          and fixed.base_row(row) == config, "%s: the recipe of e50_%s" % (row, config))
    check(precision_rows.sets(row) == ["--set", "train.precision=fp16"], "%s sets %r" % (row, precision_rows.sets(row)))
b = reproduce.ROW.get("bf16_cvt_sima")
check(b is not None and b[2] == "train" and b[3] == 3 == reproduce.ROW["cvt_sima"][3], "bf16 row: %r" % (b,))
check(precision_rows.sets("bf16_cvt_sima") == ["--set", "train.precision=bf16"] and precision_rows.sets("cvt_sima") == []
      and precision_rows.precision_of("e50_xcit_sima", reproduce.config_path("e50_xcit_sima")) == "fp32",
      "precisions of the rows")
check(sweep.sweep_row_of("bf16_cvt_sima") == "cvt_sima", "bf16_cvt_sima takes the cvt sweep's epochs")
check(precision_rows.record_precision({"command": "sima-train --set train.precision=fp16 --out x"}) == "fp16"
      and precision_rows.record_precision({"command": "sima-train --out x"}) == "fp32"
      and precision_rows.record_precision({"precision": "bf16"}) == "bf16", "a record's precision")

# A fake trainer: writes a float16 run's metrics (two epochs, then a step record), then stops on a NaN
# loss in epoch 3, as sima-train's message says it; or (FAKE_OK) finishes one epoch with a test top-1.
# As sima-eval (--checkpoint), it prints a per-image result.
FAKE = r'''#!%s
import json, os, sys
a = sys.argv
if "--checkpoint" in a:  # sima-eval --per-image on the final weights
    print(json.dumps({"top1": 93.31, "top5": 99.8, "count": 8, "correct_hex": "f7"}))
    sys.exit(0)
if "--out" not in a:
    sys.exit(0)
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "argv.json"), "w") as f:
    json.dump(a, f)
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    if os.environ.get("FAKE_OK"):
        f.write(json.dumps({"kind": "epoch", "epoch": 1, "train_loss": 0.9, "test_top1": 93.3}) + "\n")
        sys.exit(0)
    for e in (1, 2):
        f.write(json.dumps({"kind": "epoch", "epoch": e, "train_loss": 1.0 / e, "loss_scale": 32768.0,
                            "overflow_skipped_steps": e, "fp16_forward_peak": 100.0 * e}) + "\n")
    f.write(json.dumps({"kind": "step", "step": 250, "loss_scale": 2048.0, "overflow_skipped_steps": 7,
                        "fp16_forward_peak": 70000.0}) + "\n")
print("sima-train: step 260 (epoch 3, batch 26): the loss is not finite (nan); training stopped.")
sys.exit(1)
''' % sys.executable

with tempfile.TemporaryDirectory() as d:
    fake = fake_bin.install(d, FAKE, ("sima-train", "sima-eval", "sima-bench"))
    fixed.BIN, reproduce.BIN = fake, fake
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = os.path.join(d, "runs", "fp16_e50_xcit_sima_nonorm_s1")
    rec = fixed.run("fp16_e50_xcit_sima_nonorm", 1, env, out, os.path.join(d, "records"), [])
    check(rec["precision"] == "fp16" and "--set train.precision=fp16" in rec["command"]
          and "configs/paper/xcit_sima_nonorm.json" in rec["command"], "fp16 record: %r" % rec.get("command"))
    check(rec["diverged"] is True and rec["exit_code"] == 1, "a NaN loss is a divergence: %r" % rec)
    check(rec["loss_scaler"] == {"step": 250, "loss_scale": 2048.0, "overflow_skipped_steps": 7,
                                 "fp16_forward_peak": 70000.0}
          and rec["epochs"][-1]["overflow_skipped_steps"] == 2 and rec["epochs"][-1]["fp16_forward_peak"] == 200.0,
          "the scaler and the forward peak kept (the largest of every record's): %r" % rec)
    # The claim-1 kind: bf16_cvt_sima runs cvt_sima's config and planned epochs at bf16.
    reproduce.RUNS, reproduce.OUT = os.path.join(d, "records"), os.path.join(d, "runs")
    reproduce.write_json(sweep.record_path(reproduce.RUNS, "cvt_sima", 25),
                         {"exit_code": 0, "cpu_s": 1.0, "epochs": [{"epoch": 1, "val_top1": 90.0}]})
    os.environ["FAKE_OK"] = "1"
    # A float16 fixed-budget run that finishes: its top-1 and per-image record from sima-eval, as e50_ rows.
    rec2 = fixed.run("fp16_e50_xcit_sima", 0, dict(env, FAKE_OK="1"), os.path.join(d, "runs", "fp16_e50_xcit_sima_s0"),
                     os.path.join(d, "records"), [])
    check(rec2.get("top1") == 93.31 and rec2["correct_hex"] == "f7" and rec2["precision"] == "fp16"
          and "error" not in rec2, "finished fp16 record: %r" % rec2)
    reproduce.ALLOW_UNCONVERGED = True
    rec1 = reproduce.run_one("bf16_cvt_sima", 2, 1)
    del os.environ["FAKE_OK"]
    check(rec1["precision"] == "bf16" and "--set train.precision=bf16" in rec1["command"]
          and "configs/paper/cvt_sima.json" in rec1["command"] and "train.epochs=25" in rec1["command"]
          and rec1["top1"] == 93.3 and "loss_scaler" not in rec1, "bf16 record: %r" % rec1)
    # ... and each test image's correctness from sima-eval, its top-1 beside the trainer's (which stays)
    check(rec1.get("correct_hex") == "f7" and rec1["eval"]["top1"] == 93.31 and "--per-image" in rec1["eval"]["command"],
          "bf16 per-image record: %r" % rec1.get("eval"))


def table(recs, seeds):
    """A report table over toy records {row: [record per seed]}, with the seeds planned per row."""
    return report.Table("", [(r, [], "fixed", seeds.get(r, 2)) for r in seeds],
                        lambda row, s: recs.get(row, [])[s] if s < len(recs.get(row, [])) else None)


def done(seed, top1, skipped=None, scale=None, losses=(1.4, 0.8, 0.7, 0.65, 0.6)):
    eps = [{"epoch": e, "train_loss": l} for e, l in zip(rp.CURVE_EPOCHS, losses)]
    r = {"seed": seed, "exit_code": 0, "top1": top1, "epochs": eps, "command": "x"}
    if skipped is not None:
        r.update(precision="fp16", loss_scaler={"step": 19500, "loss_scale": scale, "overflow_skipped_steps": skipped})
    return r


seeds = {r: 2 for _, row in rp.CLAIM4 for r in (row, rp.fp16_row(row))}
nan = dict(rec, seed=0)
l1 = [done(0, 92.0, 3, 65536.0), done(1, 91.9, 0, 131072.0)]
t = table({rp.fp16_row("e50_xcit_sima_nonorm"): [nan, dict(rec, seed=1)], rp.fp16_row("e50_xcit_sima"): l1,
           "e50_xcit_sima_nonorm": [done(0, 92.4), done(1, 92.0)]}, seeds)
lines = rp.seed_lines(t, "none", rp.fp16_row("e50_xcit_sima_nonorm"))
check(lines[0].startswith("| none | fp16 | 0 | diverged in epoch 3 (sima-train: step 260 (epoch 3") and
      lines[0].endswith("| — | 7 (step 250) | 2048 | 70000 | 1.000 / — / — / — / — |"), "diverged seed: %r" % lines[0])
lines = rp.seed_lines(t, "ℓ1", rp.fp16_row("e50_xcit_sima"))
check(lines[0] == "| ℓ1 | fp16 | 0 | finished | 92.00 | 3 | 65536 | not logged | 1.400 / 0.800 / 0.700 / 0.650 / 0.600 |",
      "finished seed, made before the forward peak was logged: %r" % lines[0])
l1_peak = done(0, 92.0, 3, 65536.0)
l1_peak["epochs"][1]["fp16_forward_peak"], l1_peak["epochs"][3]["fp16_forward_peak"] = 812.25, 1234.51
check(rp.forward_peak(l1_peak) == "1235" and rp.forward_peak(done(0, 92.0)) == "—",
      "the forward peak: the largest over the epochs; none at fp32")
l1_peak["epochs"][1]["fp16_forward_peak_attention"], l1_peak["epochs"][2]["fp16_forward_peak_attention"] = 7.25, 9.5
l1_peak["loss_scaler"]["fp16_forward_peak_attention"] = 8.0
check(rp.forward_peak(l1_peak) == "1235 (9.5)", "with the attention cores' part: %r" % rp.forward_peak(l1_peak))
check(rp.seed_lines(t, "ℓ2", rp.fp16_row("e50_xcit_sima_l2"))[1] == "| ℓ2 | fp16 | 1 | not run | — | — | — | — | — |",
      "a seed not run")
ans = " ".join(rp.fp16_answer(t))
check("fail at float16 as the paper says? Yes: 2 of 2 seeds diverged or did not learn (in float32, 2 of 2 trained)."
      in ans
      and "Does ℓ1 prevent it? Yes: 2 of 2 ℓ1 seeds trained" in ans, "none fails, l1 trains: " + ans)
# "none" trains at fp16 (one seed below chance counts as not learning); l1 with one seed so far.
t = table({rp.fp16_row("e50_xcit_sima_nonorm"): [done(0, 91.0, 12, 8192.0), done(1, 10.0, 900, 1.0)],
           rp.fp16_row("e50_xcit_sima"): l1[:1]}, seeds)
check(rp.outcome(done(1, 10.0))[0] == "no learning", "below chance: %r" % (rp.outcome(done(1, 10.0)),))
ans = " ".join(rp.fp16_answer(t))
check("In part: 1 of 2 seeds diverged or did not learn (float32 not run)." in ans and "Yes: 1 of 1 ℓ1 seed trained at float16, so far"
      in ans, "in part, so far: " + ans)
t = table({rp.fp16_row("e50_xcit_sima_nonorm"): [done(0, 91.0, 0, 65536.0)]}, seeds)
ans = " ".join(rp.fp16_answer(t))
check("No: 0 of 1 seed diverged" in ans and "its float16 row is not run yet" in ans.replace("Its", "its"),
      "none trains, l1 not run: " + ans)
# A rederive attempt that attached nothing is said under the bf16 table, from the fp32 record.
tried = dict(done(0, 93.39), per_image_attempts=[{"cpu": "AMD EPYC", "date": "2026-12-02 16:05 UTC", "cpu_s": 61.2,
                                                  "result": "epoch 1 train loss 1.2766 against the record's 1.2756"}])
said = rp.attempts_said(table({"cvt_sima": [tried, done(1, 93.24)]}, {"cvt_sima": 3}), "cvt_sima")
check(said == " Tried on seed 0 (AMD EPYC, 2026-12-02 16:05 UTC, 61.2 CPU s): epoch 1 train loss 1.2766 against the"
      " record's 1.2756.", "rederive attempts said: %r" % said)
out = []
rp.fp16_section(table({}, seeds), out)
text = "\n".join(out)
check("not run yet" in text and "python3 results/reproduce.py run --rows fp16_e50_xcit_sima_nonorm --jobs 1 --threads 1"
      in text and text.count("| not run |") == 12, "fp16 section without records: " + text)


# bf16 - fp32 on toy records: identical per-image records give a paired interval inside the margin
# (matches fp32 by TOST); top-1s alone (analytic form) leave it unshown; a gap of a point is an effect.
def claim1(seed, top1, same=True):
    k = int(top1 * 25)
    return {"seed": seed, "exit_code": 0, "top1": top1, "wall_s": 60.0, "cpu_s": 60.0, "command": "x",
            "correct_hex": "f" * k + "0" * (2500 - k), "eval": {"count": 10000}} if same else \
        {"seed": seed, "exit_code": 0, "top1": top1, "wall_s": 60.0, "cpu_s": 60.0, "command": "x"}


def bf16_section(fp32, bf16):
    t = report.Table("", [("cvt_sima", [1], "train", 3), ("bf16_cvt_sima", [1], "train", 3)],
                     lambda row, s: {"cvt_sima": fp32, "bf16_cvt_sima": bf16}[row][s]
                     if s < len({"cvt_sima": fp32, "bf16_cvt_sima": bf16}[row]) else None)
    out = []
    rp.bf16_section(t, out)
    return out


def bf16_verdict(fp32, bf16):
    return [line for line in bf16_section(fp32, bf16) if line.startswith("| bf16 |")][0]


fp = [claim1(s, 93.0 + 0.04 * s) for s in range(3)]
line = bf16_verdict(fp, [claim1(s, 93.0 + 0.04 * s) for s in range(3)])
check("matches fp32: equivalent within ±0.3 (TOST p" in line and "paired bootstrap" in line, "bf16 equal: " + line)
line = bf16_verdict([claim1(s, t1, False) for s, t1 in enumerate((93.39, 93.24, 93.16))],
                    [claim1(s, t1, False) for s, t1 in enumerate((93.30, 93.28, 93.20))])
check("equivalence not shown (TOST p" in line and "analytic" in line, "bf16 close, unpaired: " + line)
# ... and the section says why: the analytic form's test-set term alone is wider than the margin
# (at 93 %: 1.96 x sqrt(2 x 0.93 x 0.07 / 10 000) x 100 = 0.71 points); with per-image records it does not.
note = " ".join(bf16_section([claim1(s, 93.0, False) for s in range(3)], []))
check("is ±0.71 points at 95 %, wider than the ±0.3 margin" in note, "unpaired note: " + note)
check("cannot be shown" not in " ".join(bf16_section(fp, fp)), "unpaired note under the paired form")
line = bf16_verdict(fp, [claim1(s, 92.0 + 0.04 * s) for s in range(3)])
check("an effect (negative)" in line and "| −1.00 [" in line, "bf16 a point lower: " + line)
check(bf16_verdict(fp, fp[:1]).count("so far") == 1, "bf16 with seeds still to run: " + bf16_verdict(fp, fp[:1]))
# Rows trained on different CPUs: the CPU ratio is said to compare hosts too; on one CPU nothing is said.
intel, amd = ([dict(r, cpu=c) for r in fp] for c in ("Intel Xeon", "AMD EPYC"))
note = " ".join(bf16_section(intel, [dict(r, sittings=[{"cpu": "AMD EPYC"}]) for r in amd]))
check("compares hosts as well as precisions: `cvt_sima` trained on Intel Xeon, `bf16_cvt_sima` on AMD EPYC" in note,
      "hosts note: " + note)
check("compares hosts" not in " ".join(bf16_section(amd, amd)), "hosts note on one CPU")
line = bf16_verdict(fp, [])
check("| bf16 | not run | — | — | — |" in line, "bf16 not run: " + line)

# "Every run" names each record's precision: its own field, its command's --set, else fp32.
t = report.Table("", [("fp16_e50_xcit_sima", [4], "fixed", 2), ("e50_xcit_sima", [4], "fixed", 1)],
                 lambda row, s: {"fp16_e50_xcit_sima": [dict(done(0, 92.0), command="a --set train.precision=fp16",
                                                             wall_s=1, commit="c")],
                                 "e50_xcit_sima": [dict(done(0, 92.0), wall_s=1, commit="c")]}[row][s] if s == 0 else None)
out = []
report.commands(t, out)
check("| fp16_e50_xcit_sima | 0 | fp16 | 92.00 |" in "\n".join(out) and "| e50_xcit_sima | 0 | fp32 | 92.00 |"
      in "\n".join(out), "Every run's precision column: %r" % out[-3:])

# The CPU projection counts a precision row as the float32 row it repeats: 50 epochs of the XCiT sweep's
# CPU per epoch (100 s) for each of its seeds; bf16_cvt_sima as cvt_sima, on 60 000 images.
with tempfile.TemporaryDirectory() as d:
    for arch in ("xcit_sima", "cvt_sima"):
        reproduce.write_json(sweep.record_path(d, arch, 25), {"exit_code": 0, "cpu_s": 2500.0, "epochs": [
            {"epoch": i + 1, "val_top1": 80.0} for i in range(25)]})
    rows = {r: reproduce.ROW[r] for r in ("fp16_e50_xcit_sima_nonorm", "bf16_cvt_sima", "e50_xcit_sima_nonorm")}
    total, counted, left = report_protocol.projected_cpu(d, rows)
    check(counted == list(rows) and not left and abs(total - (100 * 50 * 2 * 2 + 120 * 100 * 3)) < 1e-6,
          "projection: %r %r %r" % (total, counted, left))

# The quickstart at bf16: 4 seed pairs on 1000 images. Seeds spread by 2 points, shared by both
# precisions, and bf16 gets the same images right but 1 in 1000 (−0.1 points): paired by seed,
# equivalent within ±0.3. Shift bf16 by 1 point instead: not equivalent.
def hexbits(right, n=1000):
    bits = [1] * right + [0] * (n - right)
    return "".join("%x" % (bits[i] * 8 + bits[i + 1] * 4 + bits[i + 2] * 2 + bits[i + 3]) for i in range(0, n, 4))


def qs_records(d, gap):
    for s in range(4):
        for prec, right in (("fp32", 900 + 20 * s), ("bf16", 900 + 20 * s - gap)):
            reproduce.write_json(qp.record_path(prec, s, d), {
                "exit_code": 0, "seed": s, "precision": prec, "top1": right / 10.0, "cpu_s": 200.0,
                "correct_hex": hexbits(right), "eval": {"count": 1000}})


for gap, want in ((1, "matches fp32"), (10, "an effect (negative)")):
    with tempfile.TemporaryDirectory() as d:
        qs_records(d, gap)
        lines = qp.section(d)
        row = [x for x in lines if x.startswith("| bf16 |")]
        check(len(row) == 1 and want in row[0] and "seeds paired, 4 pairs" in row[0],
              "quickstart section, bf16 %d images fewer: %r" % (gap, row))
with tempfile.TemporaryDirectory() as d:
    check("needs 2 seeds a side" in "".join(qp.section(d)), "quickstart section without records")

finish()
