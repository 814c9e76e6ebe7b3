#!/usr/bin/env python3
"""DINO's recipe sweep: which augmentations, crops and teacher temperature let DINO learn Fashion-MNIST.

The paper rows (configs/paper/dino_xcit_*.json) keep ImageNet's recipe for 28-pixel grey images: the
first global view always blurred with sigma up to 2 pixels on a 3x3 kernel, solarisation, six 12-pixel
local crops of 5-40 % of the image, a constant teacher temperature of 0.025. Each point here changes
some of that (POINTS: `--set` overrides of configs/paper/dino_xcit_sima.json), pretrains a short run
on the 50 000 training images of the validation split (data.validation=10000, data.validation_seed=0,
as results/sweep.py), and is judged by the weighted 20-NN of its teacher's frozen features on the
10 000 held-out images (sima-eval --validation, the bank the other 50 000), once with the last class
token and once with the class tokens of both class-attention blocks concatenated (--feature-blocks 2).
The test set is never read.

    python3 results/dino_sweep.py list
    python3 results/dino_sweep.py diagnostic      # a supervised XCiT's frozen features, for scale
    python3 results/dino_sweep.py run [--points base,temp] [--epochs 5] [--train-subset 20000] [--threads 1]
    python3 results/dino_sweep.py park            # after stopping `run` with SIGTERM: keep its train state

Records: results/runs/sweeps/dino_recipe/<point>_e<E>_n<N>.json ({"command", "settings", "epochs",
"train_subset", "cpu_s", "wall_s", "epochs" rows, "evals": {"blocks1", "blocks2"}, "val_top1": the
20-NN of blocks1}). A recorded point is not run again (delete its record to repeat it). Runs go to
runs/dino_recipe/ (not committed); SIMA_BIN_DIR chooses the binaries (a copy, to keep building). A point
longer than a sitting: stop `run` with SIGTERM (the trainer saves its state), `park` copies the state into
results/runs/parked/ to commit, and the next `run` of that point resumes it, here or on another machine.
"""
import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frozen_eval  # noqa: E402
import parked  # noqa: E402
import runner  # noqa: E402
import sweep  # noqa: E402
from runner import (BIN, INTERRUPTED, ROOT, binary_version, host, epoch_records, git_commit, run_logged,  # noqa: E402
                    run_sitting, spent_totals, user_command, write_json)

ROW = "dino_xcit_sima"
RUNS = os.path.join(ROOT, "results", "runs")  # parked states go to RUNS/parked/<point>_e<E>_n<N>
RECORDS = os.path.join(RUNS, "sweeps", "dino_recipe")
OUT = os.path.join(ROOT, "runs", "dino_recipe")
FEATURE_BLOCKS = (1, 2)  # XCiT's class-attention blocks: 2 (cls_attn_layers), the most it has

# The changes to the image's scale, each a list of (key, value) --set overrides. "epochs" in a value
# is replaced by the run's epoch count (the teacher-temperature warm-up is a share of the run: DINO
# warms up over 30 of 100-300 epochs).
SCALED_BLUR = [("dino.blur_sigma_reference_size", 224)]   # DINO's sigma [0.1, 2] scaled by size / 224
NO_SOLARIZE = [("dino.solarize_p", 0.0)]
TEMP_WARMUP = [("dino.warmup_teacher_temp", 0.04), ("dino.teacher_temp", 0.07),
               ("dino.warmup_teacher_temp_epochs", "0.3*epochs")]
BIG_LOCAL = [("dino.local_crops_size", 16), ("dino.local_crops_scale", [0.15, 0.5])]
POINTS = {
    "base": [],                                   # the paper rows' recipe
    "temp": TEMP_WARMUP,                          # DINO's teacher temperature, with its warm-up
    "aug": SCALED_BLUR + NO_SOLARIZE,             # blur scaled to the image, no solarisation
    "aug_temp": SCALED_BLUR + NO_SOLARIZE + TEMP_WARMUP,
    "aug_temp_local16": SCALED_BLUR + NO_SOLARIZE + TEMP_WARMUP + BIG_LOCAL,
    "aug_temp_noblur": NO_SOLARIZE + TEMP_WARMUP + [("dino.global1_blur_p", 0.0), ("dino.global2_blur_p", 0.0),
                                                    ("dino.local_blur_p", 0.0)],
    # Added after aug_temp and aug_temp_local16: with DINO's teacher temperature (0.04 -> 0.07) the
    # 4096-way output fell to uniform (loss ln 4096, KL 0) within 2 of 5 epochs, so the remaining
    # points keep the paper rows' sharper teacher (0.025) or a constant 0.04.
    "aug_local16": SCALED_BLUR + NO_SOLARIZE + BIG_LOCAL,
    "aug_t04": SCALED_BLUR + NO_SOLARIZE + [("dino.warmup_teacher_temp", 0.04), ("dino.teacher_temp", 0.04)],
    # Added after the 20-epoch base run (20-NN 75.3 at 10 epochs, 79.3 at 20, random init 73.8): every
    # 5-epoch point above sits within a point of the untrained features, so learning is slow rather than
    # wrong. The levers of speed: a 4x learning rate (DINO's 0.0005 per 256 images is ImageNet's for
    # 100-800 epochs), a smaller output (4096 prototypes for 10 classes), a faster teacher.
    "lr4": [("optimizer.base_lr", 0.002)],
    "aug_local16_lr4": SCALED_BLUR + NO_SOLARIZE + BIG_LOCAL + [("optimizer.base_lr", 0.002)],
    "out1024": [("dino.out_dim", 1024)],
    "m99": [("dino.momentum_teacher", 0.99)],
}


def value_of(v, epochs):
    """A point's value for a run of `epochs` epochs ("0.3*epochs" -> round(0.3 * epochs), at least 1)."""
    if isinstance(v, str) and v.endswith("*epochs"):
        return max(1, int(round(float(v[:-len("*epochs")]) * epochs)))
    return v


def settings(point, epochs):
    """{key: value} of the point's overrides at this epoch count."""
    return {k: value_of(v, epochs) for k, v in POINTS[point]}


def set_text(v):
    return "[%s]" % ",".join(str(x) for x in v) if isinstance(v, list) else str(v)


def train_argv(point, epochs, subset, out, resume=False):
    extra = []
    for k, v in settings(point, epochs).items():
        extra += ["--set", "%s=%s" % (k, set_text(v))]
    if subset:
        extra += ["--set", "data.train_subset=%d" % subset]
    return sweep.argv_for(BIN, ROOT, ROW, epochs, out, resume, extra)


def eval_argv(checkpoint, blocks):
    return frozen_eval.argv(BIN, checkpoint, frozen_eval.VALIDATION_SPLIT, blocks=blocks)


def record_path(point, epochs, subset):
    return os.path.join(RECORDS, "%s_e%d_n%d.json" % (point, epochs, subset or 50000))


def run_point(point, epochs, subset, threads):
    """Trains (or resumes) and evaluates one point; returns its record (also written), or None when the
    trainer was stopped (SIGTERM: its train state saved, `park` keeps it for another sitting)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = os.path.join(OUT, "%s_e%d_n%d" % (point, epochs, subset or 50000))
    os.makedirs(OUT, exist_ok=True)
    argv = train_argv(point, epochs, subset, out)  # the command of the record: as a user starts it
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    done = epoch_records(out)
    if len(done) == epochs and os.path.exists(os.path.join(out, "model.safetensors")):
        # trained by a launcher stopped before it could record the point: its epochs' CPU, no sitting
        code, last = 0, ""
        spent = [{"cpu_s": round(sum(e["epoch_cpu_seconds"] for e in done), 1),
                  "wall_s": round(sum(e["epoch_seconds"] for e in done), 1), "resumed": False,
                  "epochs_run": epochs, "from": "the run folder's epoch records (launcher stopped)"}]
    else:
        resume = parked.start_or_resume(RUNS, out, epochs)  # cut off in an earlier sitting, maybe parked
        code, last, spent = run_sitting(train_argv(point, epochs, subset, out, resume), env, out, resume)
        if code == INTERRUPTED:
            return None
    rec = {"row": ROW, "point": point, "settings": settings(point, epochs), "train_subset": subset or 50000,
           "command": user_command(argv, threads), "commit": git_commit(), "binary": binary_version(BIN),
           "date": started, "epochs_planned": epochs, "exit_code": code, "seed": sweep.SWEEP_SEED,
           "split": "validation", "validation": sweep.VALIDATION, "validation_seed": sweep.VALIDATION_SEED,
           "threads": threads, **host(),
           "metric": "weighted 20-NN top-1 on the teacher's frozen features (validation split)",
           "epochs": sweep.epoch_rows(epoch_records(out))}
    rec.update(spent_totals(spent))
    if code != 0:
        rec["error"] = last
    else:
        ckpt = os.path.join(out, "model.safetensors")
        rec["evals"] = {"blocks%d" % b: frozen_eval.evaluate(eval_argv(ckpt, b), env, threads,
                                                              out + ".eval_b%d.json" % b) for b in FEATURE_BLOCKS}
        knn = frozen_eval.scores(rec["evals"]["blocks1"])[0]
        if knn is not None:
            rec["val_top1"] = knn
    write_json(record_path(point, epochs, subset), rec)
    parked.drop(RUNS, out)
    return rec


SUPERVISED = os.path.join("results", "runs", "parked", "sweep_xcit_sima_e200", "best.safetensors")


def diagnostic(threads):
    """What a good feature extractor of this size reaches: the frozen features of the supervised XCiT SimA
    of the epoch sweep (48 wide, depth 4, the DINO rows' backbone; trained with labels on the same 50 000
    images, cut off after 24 of 200 epochs and parked; best.safetensors is its best epoch on the held-out
    images), scored as a sweep point, and the raw pixels beside it."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    os.makedirs(OUT, exist_ok=True)
    ckpt = os.path.join(ROOT, SUPERVISED)
    log = os.path.join(OUT, "diagnostic")
    rec = {"what": "labels, 24 epochs of the xcit_sima sweep's 200-epoch schedule (parked)",
           "trained": "24 × 50000", "checkpoint": SUPERVISED, "commit": git_commit(), "binary": binary_version(BIN),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "split": "validation", "validation": sweep.VALIDATION, "validation_seed": sweep.VALIDATION_SEED,
           "threads": threads, **host(),
           "evals": {"blocks%d" % b: frozen_eval.evaluate(eval_argv(ckpt, b), env, threads, log + "_b%d.json" % b)
                     for b in FEATURE_BLOCKS},
           "baselines": {"pixels": frozen_eval.evaluate(frozen_eval.argv(BIN, ckpt, frozen_eval.VALIDATION_SPLIT,
                                                                         "pixels"), env, threads, log + "_pixels.json")}}
    write_json(os.path.join(RECORDS, "diagnostic_supervised_xcit_sima.json"), rec)
    for k, ev in list(rec["evals"].items()) + [("pixels", rec["baselines"]["pixels"])]:
        print("%-8s 20-NN / probe %s" % (k, frozen_eval.scores(ev)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["list", "run", "diagnostic", "park"])
    ap.add_argument("--points", default=",".join(POINTS))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--train-subset", type=int, default=0, help="pretrain on a seeded subset of the 50 000 (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.what == "diagnostic":
        return diagnostic(a.threads)
    if a.what == "park":  # the cut-off points' train states, into results/runs/parked/ (results/parked.py)
        names = parked.park(RUNS, OUT)
        print("dino_sweep: parked %d cut-off point(s)%s" % (len(names), "".join("\n  " + n for n in names)))
        return
    if a.what == "run":
        runner.stop_on_sigterm()  # SIGTERM / Ctrl-C: the trainer saves its state and no new point starts
    points = a.points.split(",")
    for p in points:
        if p not in POINTS:
            sys.exit("dino_sweep: unknown point '%s' (points: %s)" % (p, ", ".join(POINTS)))
    for p in points:
        path = record_path(p, a.epochs, a.train_subset)
        if a.what == "list" or os.path.exists(path):
            print("%-18s %s %s" % (p, "recorded" if os.path.exists(path) else "not run", settings(p, a.epochs)))
            continue
        if runner.STOP.is_set():
            break
        rec = run_point(p, a.epochs, a.train_subset, a.threads)
        if rec is None:
            print("%-18s interrupted, its train state saved (`dino_sweep.py park` keeps it)" % p, flush=True)
            break
        scores = {b: frozen_eval.scores(e)[0] for b, e in rec.get("evals", {}).items()}
        print("%-18s exit %d, %.0f CPU s, 20-NN %s" % (p, rec["exit_code"], rec["cpu_s"], scores), flush=True)


if __name__ == "__main__":
    main()
