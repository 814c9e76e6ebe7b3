#!/usr/bin/env python3
"""Each test image's correctness for finished runs that kept none, re-derived by training them again.

The paired statistics of results/verdicts.py need every run of a comparison to say which test images
it got right (`correct_hex`, `sima-eval --per-image`). The claim-1 rows were recorded before that
existed, and their checkpoints are gone with the machines that trained them. Training is deterministic
for a given command, seed, thread count, build and CPU (resume is byte-exact too), so running a record's
own command again gives its weights again, and `sima-eval --per-image` on them gives its per-image
record. What makes that safe is a check, not an assumption: the bits are attached to the record only
when the retrained model's test top-1, both the trainer's last evaluation and sima-eval's, equals the
record's `top1`. Another build or CPU can change the bits (oneDNN picks its kernels for the CPU); then
the attempt is written into the record (`per_image_attempts`: its CPU, host and top-1) and nothing is
attached. That shows early: a run that repeats its record has the record's first-epoch train loss to
the last bit, so when the first epoch's differs the trainer is stopped there (its attempt says so)
rather than trained to the end. Either way the CPU spent is in the record, and the report's ledger counts it
(results/report_budget.py).

    python3 results/rederive.py run --rows cvt_sima [--seeds 0,1,2]     # at each record's own thread count
    python3 results/rederive.py park     # after stopping `run` with SIGTERM: keep the train states

Runs go to runs/rederive/<row>_s<seed> (not committed); a run longer than a sitting is parked and
resumed like the study's (results/parked.py). SIMA_BIN_DIR chooses the binaries.
"""
import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixed  # noqa: E402
import parked  # noqa: E402
import runner  # noqa: E402
from runner import (BIN, INTERRUPTED, ROOT, binary_version, host, epoch_records, git_commit, run_sitting,  # noqa: E402
                    spent_totals, user_command, write_json)

RUNS = os.path.join(ROOT, "results", "runs")
OUT = os.path.join(ROOT, "runs", "rederive")


def record_path(row, seed, runs=None):
    return os.path.join(runs or RUNS, row, "s%d.json" % seed)


def command_argv(rec, out):
    """The record's training command as argv: its binary from BIN, its files from the repository, its
    run folder `out`; and its thread count. None when the command is not a sima-train run."""
    words = shlex.split(rec.get("command", ""))
    env = [w for w in words if "=" in w and not w.startswith("-") and w.split("=")[0].isupper()]
    argv = words[len(env):]
    if not argv or os.path.basename(argv[0]) != "sima-train" or "--out" not in argv:
        return None, None
    threads = int(dict(w.split("=", 1) for w in env).get("OMP_NUM_THREADS", rec.get("threads", 1)))
    argv = [os.path.join(BIN, "sima-train")] + [os.path.join(ROOT, a) if a.startswith("configs/") else a
                                                 for a in argv[1:]]
    argv[argv.index("--out") + 1] = out
    return argv, threads


def planned_epochs(argv):
    sets = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--set"]
    return next((int(s.split("=", 1)[1]) for s in sets if s.startswith("train.epochs=")), None)


class FirstEpochWatch(threading.Thread):
    """Fails fast: a retrained run that repeats its record has the record's first-epoch train loss to
    the last bit. This thread polls the run folder's metrics; when the first epoch's loss is there and
    differs, the build or CPU does not repeat the run, so it stops the trainer (SIGTERM: it saves and
    exits) instead of training the rest for nothing. `mismatch` is then (got, the record's)."""

    def __init__(self, out, want):
        super().__init__(daemon=True)
        self.out, self.want, self.mismatch = out, want, None
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(POLL_S):
            first = (epoch_records(self.out) or [None])[0]
            if first is None:
                continue
            if first.get("train_loss") != self.want:
                self.mismatch = (first.get("train_loss"), self.want)
                with runner._trainers_lock:
                    for p in list(runner._trainers.values()):
                        p.send_signal(signal.SIGTERM)
            return


POLL_S = 2.0  # seconds between two looks at the first epoch


def no_repeat(rec, attempt, out, mismatch):
    """The record keeps an attempt whose first epoch already differed; its run folder goes."""
    attempt["result"] = ("epoch 1 train loss %r against the record's %r: this build and CPU do not repeat the"
                         " run; stopped after epoch 1, nothing attached" % mismatch)
    rec.setdefault("per_image_attempts", []).append(attempt)
    shutil.rmtree(out, ignore_errors=True)
    return attempt["result"]


def rederive(row, seed):
    """Retrains one run and attaches its per-image record when the top-1 matches. Returns a line saying
    what happened; None when stopped (SIGTERM) with the train state saved."""
    path = record_path(row, seed)
    if not os.path.exists(path):
        return "no record"
    with open(path) as f:
        rec = json.load(f)
    if rec.get("exit_code") != 0 or rec.get("top1") is None:
        return "not a finished run"
    if rec.get("correct_hex"):
        return "has its per-image record already"
    out = os.path.join(OUT, "%s_s%d" % (row, seed))
    argv, threads = command_argv(rec, out)
    if argv is None:
        return "its command is not a sima-train run: %s" % rec.get("command")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    resume = parked.start_or_resume(RUNS, out, planned_epochs(argv))
    want = ((rec.get("epochs") or [{}])[0]).get("train_loss")
    watch = FirstEpochWatch(out, want) if want is not None and not epoch_records(out) else None
    if watch:
        watch.start()
    code, last, spent = run_sitting(argv + (["--resume"] if resume else []), env, out, resume)
    if watch:
        watch.done.set()
        watch.join()
    if code == INTERRUPTED and not (watch and watch.mismatch):
        return None
    attempt = {"command": user_command(argv, threads), "commit": git_commit(), "binary": binary_version(BIN),
               **host(), "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
               **spent_totals(spent), "exit_code": code}
    if watch and watch.mismatch:
        verdict = no_repeat(rec, attempt, out, watch.mismatch)
        write_json(path, rec)
        parked.drop(RUNS, out)
        return verdict
    if code == 0:
        fixed.evaluate_test(attempt, out, env, threads, [])
        attempt["cpu_s"] = round(attempt["cpu_s"] + attempt["eval"]["cpu_s"], 1)
    last_epoch = (epoch_records(out) or [{}])[-1]
    got = (last_epoch.get("test_top1"), attempt.get("top1"))
    if code == 0 and attempt.get("correct_hex") and got == (rec["top1"], rec["top1"]):
        rec["correct_hex"] = attempt.pop("correct_hex")
        rec["per_image"] = dict(attempt, how="re-derived by results/rederive.py: the run trained again from its "
                                             "command reproduced the record's test top-1")
        verdict = "attached: top-1 %.2f reproduced" % rec["top1"]
    else:
        attempt.pop("correct_hex", None)
        attempt["result"] = ("failed: %s" % last if code != 0 else
                             "top-1 %s (trainer) / %s (sima-eval) against the record's %.2f: nothing attached"
                             % (got[0], got[1], rec["top1"]))
        rec.setdefault("per_image_attempts", []).append(attempt)
        verdict = attempt["result"]
    write_json(path, rec)
    parked.drop(RUNS, out)
    return verdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["run", "park"])
    ap.add_argument("--rows", default="", help="comma-separated rows, e.g. cvt_sima,cvt_softmax")
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args()
    if a.what == "park":
        names = parked.park(RUNS, OUT)
        print("rederive: parked %d cut-off run(s)%s" % (len(names), "".join("\n  " + n for n in names)))
        return
    runner.stop_on_sigterm()
    for row in [r for r in a.rows.split(",") if r]:
        for seed in [int(s) for s in a.seeds.split(",")]:
            if runner.STOP.is_set():
                return
            said = rederive(row, seed)
            print("%s seed %d: %s" % (row, seed, said or "stopped, its train state saved (`rederive.py park`)"),
                  flush=True)


if __name__ == "__main__":
    main()
