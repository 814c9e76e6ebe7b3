#!/usr/bin/env python3
"""results/dino_sweep.py and results/report_dino.py on made-up records: a point's overrides at an epoch
count (the teacher-temperature warm-up a share of the run), the commands it runs (validation split,
never the test set; both feature choices), a point cut off, parked and resumed in a second sitting (a
fake trainer), and the report's table and best point."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_bin  # noqa: E402  (tests/results/fake_bin.py)
import dino_sweep  # noqa: E402
import report_dino  # noqa: E402
from runner import write_json  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


# overrides: "0.3*epochs" becomes a whole number of epochs, at least 1
check(dino_sweep.value_of("0.3*epochs", 10) == 3, "warm-up of 10 epochs")
check(dino_sweep.value_of("0.3*epochs", 1) == 1, "warm-up at least 1 epoch")
check(dino_sweep.value_of(0.07, 10) == 0.07, "plain values unchanged")
s = dino_sweep.settings("aug_temp", 20)
check(s["dino.warmup_teacher_temp_epochs"] == 6 and s["dino.teacher_temp"] == 0.07, "aug_temp at 20 epochs: %s" % s)
check(s["dino.blur_sigma_reference_size"] == 224 and s["dino.solarize_p"] == 0.0, "aug_temp's augmentations: %s" % s)
check(dino_sweep.settings("base", 5) == {}, "base changes nothing")

# the training command: the paper row's config, the validation split, the overrides, the subset
argv = dino_sweep.train_argv("aug_temp_local16", 5, 20000, "/tmp/x")
line = " ".join(argv)
for want in ("configs/paper/dino_xcit_sima.json", "data.validation=10000", "data.validation_seed=0", "train.epochs=5",
             "dino.local_crops_scale=[0.15,0.5]", "dino.local_crops_size=16", "data.train_subset=20000"):
    check(want in line, "train command has %s: %s" % (want, line))
check("data.train_subset" not in " ".join(dino_sweep.train_argv("base", 5, 0, "/tmp/x")), "no subset when 0")
# the evaluation: k-NN and probe on the held-out images (never the test set), with the feature blocks
ev = dino_sweep.eval_argv("/tmp/x/model.safetensors", 2)
check(ev[ev.index("--validation") + 1] == "10000" and ev[ev.index("--feature-blocks") + 1] == "2",
      "eval command: %s" % ev)
check("--knn" in ev and "--linear-probe" in ev, "eval scores both: %s" % ev)


# A point longer than a sitting. The fake trainer's first sitting saves a state after epoch 1 and
# exits as sima-train does when stopped (130); with --resume it runs epochs 2 and 3 and writes the
# model. Its sima-eval prints a k-NN and probe result.
FAKE = r'''#!%s
import json, os, sys
a = sys.argv
if "--checkpoint" in a:
    print(json.dumps({"knn": {"results": [{"k": 20, "top1": 77.7}]}, "linear_probe": {"top1": 70.0}}))
    sys.exit(0)
if "--out" not in a:
    sys.exit(0)
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
ep = lambda e: json.dumps({"kind": "epoch", "epoch": e, "train_loss": 8.0 - e, "epoch_cpu_seconds": 1.0}) + "\n"
if "--resume" not in a:
    json.dump({"train": {"epochs": 3}}, open(os.path.join(out, "config.json"), "w"))
    open(os.path.join(out, "train_state.safetensors"), "wb").write(b"state after epoch 1")
    open(os.path.join(out, "metrics.jsonl"), "w").write(ep(1))
    sys.exit(130)
assert open(os.path.join(out, "train_state.safetensors"), "rb").read() == b"state after epoch 1"
with open(os.path.join(out, "metrics.jsonl"), "a") as f:
    f.write(ep(2) + ep(3))
open(os.path.join(out, "model.safetensors"), "wb").write(b"weights")
''' % sys.executable

with tempfile.TemporaryDirectory() as d:
    fake = fake_bin.install(d, FAKE)
    dino_sweep.BIN = fake
    dino_sweep.RUNS, dino_sweep.OUT = os.path.join(d, "records"), os.path.join(d, "runs")
    dino_sweep.RECORDS = os.path.join(dino_sweep.RUNS, "sweeps", "dino_recipe")
    check(dino_sweep.run_point("base", 3, 0, 1) is None, "a stopped trainer: no record")
    check(not os.path.exists(dino_sweep.record_path("base", 3, 0)), "no record written for a cut-off point")
    check(dino_sweep.parked.park(dino_sweep.RUNS, dino_sweep.OUT) == ["base_e3_n50000"], "the cut-off point parked")
    shutil.rmtree(dino_sweep.OUT)  # another machine: only the repository's parked copy is left
    rec = dino_sweep.run_point("base", 3, 0, 1)
    ok = rec is not None and rec["exit_code"] == 0
    check(ok and [e["epoch"] for e in rec["epochs"]] == [1, 2, 3], "resumed to epoch 3: %r" % rec)
    check(ok and [x["resumed"] for x in rec["sittings"]] == [False, True], "two sittings: %r" % (rec or {}).get("sittings"))
    check(ok and all(isinstance(x.get("isa"), list) and x.get("cpu") for x in rec["sittings"]),
          "each sitting names its CPU and instruction sets: %r" % (rec or {}).get("sittings"))
    check(ok and "--resume" not in rec["command"] and rec["val_top1"] == 77.7, "the record's command and score")
    check(not os.path.exists(os.path.join(dino_sweep.RUNS, "parked", "base_e3_n50000")), "the parked copy dropped")


def evaluation(knn20, probe):
    return {"exit_code": 0, "result": {"knn": {"results": [{"k": 20, "top1": knn20}]}, "linear_probe": {"top1": probe}}}


with tempfile.TemporaryDirectory() as d:
    out = []
    report_dino.dino_recipe_section(d, out)
    check(out == [], "no section without records")
    recs = os.path.join(d, "sweeps", "dino_recipe")
    write_json(os.path.join(recs, "base_e5_n20000.json"),
               {"point": "base", "settings": {}, "epochs_planned": 5, "train_subset": 20000, "exit_code": 0,
                "cpu_s": 600.0, "evals": {"blocks1": evaluation(80.0, 78.0), "blocks2": evaluation(81.0, 79.0)},
                "epochs": [{"epoch": 5, "train_loss": 8.3175}]})
    out = []
    report_dino.dino_recipe_section(d, out)
    check("One point has finished, so nothing is compared yet" in "\n".join(out) and
          "Best point" not in "\n".join(out), "one point: no best: %s" % out)
    out = []
    write_json(os.path.join(recs, "temp_e5_n20000.json"),
               {"point": "temp", "settings": {"dino.teacher_temp": 0.07}, "epochs_planned": 5, "train_subset": 20000,
                "exit_code": 0, "cpu_s": 660.0,
                "evals": {"blocks1": evaluation(84.5, 82.0), "blocks2": evaluation(84.0, 83.0)},
                "epochs": [{"epoch": 5, "train_loss": 4.0, "teacher_entropy": 1.234, "teacher_batch_entropy": 7.5}]})
    write_json(os.path.join(recs, "aug_e5_n20000.json"),
               {"point": "aug", "settings": {}, "epochs_planned": 5, "train_subset": 20000, "exit_code": 1,
                "error": "boom", "cpu_s": 1.0})
    report_dino.dino_recipe_section(d, out)
    text = "\n".join(out)
    check("| temp | `teacher_temp`=0.07 | 5 × 20000 | 11 | 1.23 / 7.50 | 84.50 / 82.00 | 84.00 / 83.00 |" in text, text)
    check("| base | none (the paper rows' recipe) | 5 × 20000 | 10 | — | 80.00 / 78.00 |" in text, text)  # no entropy kept
    check("| aug | none (the paper rows' recipe) | 5 × 20000 | — | — | failed: boom | — |" in text, text)
    check("Best point on the validation split: **temp** (last-token features), 20-NN 84.50." in text, text)
    check("base: its last epoch's loss 8.318 is ln 4096 = 8.318, the uniform output" in text, text)
    check("temp: its last epoch" not in text, text)
    # A point that learned, then fell back to the uniform output, is a collapse and no candidate;
    # a point of another budget (5 x 50000) is not compared with the 5 x 20000 ones.
    write_json(os.path.join(recs, "hot_e5_n20000.json"),
               {"point": "hot", "settings": {"dino.teacher_temp": 0.1}, "epochs_planned": 5, "train_subset": 20000,
                "exit_code": 0, "cpu_s": 600.0, "evals": {"blocks1": evaluation(90.0, 90.0)},
                "epochs": [{"epoch": 1, "train_loss": 7.5}, {"epoch": 2, "train_loss": 8.318}]})
    write_json(os.path.join(recs, "big_e5_n50000.json"),
               {"point": "big", "settings": {}, "epochs_planned": 5, "train_subset": 50000, "exit_code": 0,
                "cpu_s": 900.0, "evals": {"blocks1": evaluation(95.0, 95.0)}})
    out = []
    report_dino.dino_recipe_section(d, out)
    text = "\n".join(out)
    check("hot: its loss fell to 7.500 in epoch 1, then rose back to 8.318 = ln 4096, the uniform output" in text,
          text)
    check("Best point on the validation split: **temp** (last-token features), 20-NN 84.50." in text, text)
    os.remove(os.path.join(recs, "temp_e5_n20000.json"))
    out = []
    report_dino.dino_recipe_section(d, out)
    text = "\n".join(out)
    check("Best point" not in text, "big is of another budget than the sweep's, the rest did not learn: " + text)

pts = [{"evals": {"blocks1": evaluation(80.0, 1.0), "blocks2": evaluation(81.5, 1.0)}},
       {"evals": {"blocks1": evaluation(79.0, 1.0)}}]
check(abs(report_dino.spread(pts) - 2.5) < 1e-9, "spread of the best 20-NN: %r" % report_dino.spread(pts))

finish()
