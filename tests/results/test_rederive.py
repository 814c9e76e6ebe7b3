#!/usr/bin/env python3
"""results/rederive.py with a fake trainer: a record's command is run again (its binary from BIN, its
run folder replaced, its thread count kept); the per-image record is attached only when the retrained
top-1 equals the record's, otherwise the attempt is kept in the record with nothing attached; a run
stopped mid-way is parked and resumed; one whose first epoch's train loss differs from the record's is
stopped there; records that have their bits, or did not finish, are left alone."""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_bin  # noqa: E402  (tests/results/fake_bin.py)
import fixed  # noqa: E402
import rederive  # noqa: E402
from runner import write_json  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


# The fake sima-train: FAKE_STOP set, it saves a state after epoch 1 and exits as a stopped trainer
# (130); otherwise it finishes its epochs (resuming after the saved one) with test top-1 FAKE_TOP1 at the
# end. The fake sima-eval prints that top-1 with 8 images' correctness.
FAKE = r'''#!%s
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))  # as sima-train: saves, exits 130
a = sys.argv
top1 = float(os.environ.get("FAKE_TOP1", "93.39"))
if "--checkpoint" in a:
    print(json.dumps({"top1": top1, "top5": 99.9, "count": 8, "correct_hex": "e5"}))
    sys.exit(0)
if "--out" not in a:
    sys.exit(0)
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
json.dump({"argv": a, "threads": os.environ.get("OMP_NUM_THREADS")}, open(os.path.join(out, "argv.json"), "w"))
ep = lambda e, t: json.dumps({"kind": "epoch", "epoch": e, "train_loss": 1.0, "test_top1": t}) + "\n"
if "--resume" not in a:
    json.dump({"train": {"epochs": 2}}, open(os.path.join(out, "config.json"), "w"))
    open(os.path.join(out, "metrics.jsonl"), "w").write(ep(1, 80.0))
    open(os.path.join(out, "train_state.safetensors"), "wb").write(b"state")
    if os.environ.get("FAKE_STOP"):
        sys.exit(130)
    if os.environ.get("FAKE_WAIT"):  # a long run: until SIGTERM (saved, exit 130), at most 30 s
        time.sleep(30)
open(os.path.join(out, "metrics.jsonl"), "a").write(ep(2, top1))
open(os.path.join(out, "model.safetensors"), "wb").write(b"weights")
''' % sys.executable

COMMAND = ("OMP_NUM_THREADS=2 build/bin/sima-train --config configs/paper/cvt_sima.json --set train.seed=0"
           " --set train.epochs=2 --set train.eval_every=2 --out runs/paper/cvt_sima_s0 --quiet")

with tempfile.TemporaryDirectory() as d:
    fake = fake_bin.install(d, FAKE)
    rederive.BIN = fixed.BIN = fake
    rederive.RUNS, rederive.OUT = os.path.join(d, "records"), os.path.join(d, "runs")
    base = {"command": COMMAND, "exit_code": 0, "top1": 93.39, "cpu_s": 100.0, "threads": 2}

    # The command as it ran: the binary from BIN, the config from the repository, the new run folder.
    argv, threads = rederive.command_argv(base, "/x/out")
    check(threads == 2 and argv[0] == os.path.join(fake, "sima-train") and argv[argv.index("--out") + 1] == "/x/out"
          and argv[2] == os.path.join(rederive.ROOT, "configs/paper/cvt_sima.json") and rederive.planned_epochs(argv) == 2,
          "command argv: %r" % argv)

    # Reproduced: the bits are attached, with how they were made; the thread count is the record's.
    write_json(rederive.record_path("cvt_sima", 0), base)
    said = rederive.rederive("cvt_sima", 0)
    rec = json.load(open(rederive.record_path("cvt_sima", 0)))
    check(said.startswith("attached") and rec.get("correct_hex") == "e5", "reproduced: %s %r" % (said, rec))
    check(rec.get("per_image", {}).get("top1") == 93.39 and "--resume" not in rec["per_image"]["command"]
          and rec["per_image"]["command"].startswith("OMP_NUM_THREADS=2 "), "per_image: %r" % rec.get("per_image"))
    check(rederive.rederive("cvt_sima", 0) == "has its per-image record already", "not run twice")

    # Not reproduced: the attempt is kept (its CPU counts), nothing attached.
    write_json(rederive.record_path("cvt_sima", 1), dict(base, command=COMMAND.replace("seed=0", "seed=1")))
    os.environ["FAKE_TOP1"] = "93.40"
    said = rederive.rederive("cvt_sima", 1)
    rec = json.load(open(rederive.record_path("cvt_sima", 1)))
    check("nothing attached" in said and "correct_hex" not in rec and len(rec.get("per_image_attempts", [])) == 1
          and rec["per_image_attempts"][0]["cpu_s"] >= 0, "not reproduced: %s %r" % (said, rec))
    del os.environ["FAKE_TOP1"]

    # Stopped mid-way: no change to the record; parked, then resumed on a machine without the run folder.
    write_json(rederive.record_path("cvt_sima", 2), dict(base, command=COMMAND.replace("seed=0", "seed=2")))
    os.environ["FAKE_STOP"] = "1"
    check(rederive.rederive("cvt_sima", 2) is None, "stopped: None")
    del os.environ["FAKE_STOP"]
    check("correct_hex" not in json.load(open(rederive.record_path("cvt_sima", 2))), "stopped: record unchanged")
    check(rederive.parked.park(rederive.RUNS, rederive.OUT) == ["cvt_sima_s2"], "parked")
    shutil.rmtree(rederive.OUT)
    said = rederive.rederive("cvt_sima", 2)
    rec = json.load(open(rederive.record_path("cvt_sima", 2)))
    check(said.startswith("attached") and [s["resumed"] for s in rec["per_image"]["sittings"]] == [False, True],
          "resumed and attached: %s %r" % (said, rec.get("per_image")))

    # Fails fast: the first epoch's train loss (the fake's 1.0) differs from the record's, so the trainer
    # is stopped after it (not after the fake's 30 s), the attempt says why, its run folder is gone.
    rederive.POLL_S = 0.05
    write_json(rederive.record_path("cvt_sima", 3), dict(base, command=COMMAND.replace("seed=0", "seed=3"),
                                                         epochs=[{"epoch": 1, "train_loss": 0.9}]))
    os.environ["FAKE_WAIT"] = "1"
    t0 = time.monotonic()
    said = rederive.rederive("cvt_sima", 3)
    took = time.monotonic() - t0
    rec = json.load(open(rederive.record_path("cvt_sima", 3)))
    att = (rec.get("per_image_attempts") or [{}])[-1]
    check(said is not None and "epoch 1 train loss 1.0 against the record's 0.9" in said and took < 20
          and "correct_hex" not in rec and att.get("exit_code") == 130 and att.get("cpu_s", -1) >= 0
          and not os.path.exists(os.path.join(rederive.OUT, "cvt_sima_s3")),
          "first epoch differs: %s (%.1f s) %r" % (said, took, rec))
    del os.environ["FAKE_WAIT"]
    # ... and when it matches, the run goes on to the end and the bits are attached.
    write_json(rederive.record_path("cvt_sima", 4), dict(base, command=COMMAND.replace("seed=0", "seed=4"),
                                                         epochs=[{"epoch": 1, "train_loss": 1.0}]))
    said = rederive.rederive("cvt_sima", 4)
    check(said.startswith("attached"), "first epoch matches: %s" % said)

    # Left alone: a failed run, a missing record.
    write_json(rederive.record_path("cvt_softmax", 0), dict(base, exit_code=1))
    check(rederive.rederive("cvt_softmax", 0) == "not a finished run", "a failed run")
    check(rederive.rederive("cvt_softmax", 1) == "no record", "no record")

finish()
