#!/usr/bin/env python3
"""The quickstart at bf16 against fp32: does a bf16-trained model land within 0.3 points of fp32?

The README's main job (configs/quickstart.json: CvT SimA 32/64/128 wide, 3 epochs on the 60 000
training images) trained for seeds 0 to SEEDS - 1 at each precision, `--set train.precision=<p>
--set train.seed=<s>`, one thread; each final model is evaluated on the 10 000 test images with
each image's correctness kept (`sima-eval --per-image`), so bf16 - fp32 gets the paired bootstrap
of results/verdicts.py (seed pairs and test images), and the verdict is equivalence by two one-sided
tests at +/- verdicts.MARGIN points. Nothing is chosen from these figures: the quickstart's settings
are the config's (whose trainer also scores the test set after each epoch, as the README's job does).

    python3 results/quickstart_precision.py run [--seeds 10] [--threads 1]
    python3 results/quickstart_precision.py table

Records: results/runs/quickstart_precision/<precision>_s<seed>.json ({"command", "precision",
"seed", "cpu_s", "wall_s", "epochs", "top1", "correct_hex", "eval"}). A recorded run is not run
again. Run folders go to runs/quickstart_precision/ (not committed); SIMA_BIN_DIR chooses the
binaries (a copy, to keep building).
"""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixed  # noqa: E402
import report_claims  # noqa: E402
import verdicts  # noqa: E402
from runner import (BIN, ROOT, binary_version, host, epoch_records, git_commit, run_sitting,  # noqa: E402
                    spent_totals, user_command, write_json)

CONFIG = os.path.join(ROOT, "configs", "quickstart.json")
RECORDS = os.path.join(ROOT, "results", "runs", "quickstart_precision")
OUT = os.path.join(ROOT, "runs", "quickstart_precision")
PRECISIONS = ("fp32", "bf16")
SEEDS = 10  # seed s at both precisions starts from the same weights and batches: pairs


def record_path(precision, seed, records=RECORDS):
    return os.path.join(records, "%s_s%d.json" % (precision, seed))


def train_argv(precision, seed, out):
    return [os.path.join(BIN, "sima-train"), "--config", CONFIG, "--set", "train.precision=%s" % precision,
            "--set", "train.seed=%d" % seed, "--out", out, "--quiet"]


def run_one(precision, seed, threads):
    """Trains one seed at one precision from scratch, evaluates its final weights on the test set with
    per-image correctness, and writes its record."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = os.path.join(OUT, "%s_s%d" % (precision, seed))
    os.makedirs(OUT, exist_ok=True)
    argv = train_argv(precision, seed, out)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code, last, spent = run_sitting(argv, env, out, False)
    rec = {"command": user_command(argv, threads), "precision": precision, "seed": seed, "commit": git_commit(),
           "binary": binary_version(BIN), "date": started, "threads": threads, **host(),
           "exit_code": code, "epochs": [{k: e[k] for k in ("epoch", "train_loss", "epoch_cpu_seconds") if k in e}
                                         for e in epoch_records(out)]}
    rec.update(spent_totals(spent))
    if code != 0:
        rec["error"] = last
    else:
        fixed.evaluate_test(rec, out, env, threads, [])
    write_json(record_path(precision, seed), rec)
    return rec


def load(records=RECORDS):
    """{precision: [record, ...]} of the finished runs, by seed."""
    out = {p: [] for p in PRECISIONS}
    for p in PRECISIONS:
        for s in range(SEEDS):
            path = record_path(p, s, records)
            if os.path.exists(path):
                with open(path) as f:
                    r = json.load(f)
                if r.get("exit_code") == 0 and r.get("top1") is not None:
                    out[p].append(r)
    return out


def runs_of(recs):
    """(top-1, per-image bits or None) of each record, for verdicts.estimate."""
    return [(r["top1"], verdicts.bits_from_hex(r["correct_hex"], r["eval"]["count"]) if r.get("correct_hex") else None)
            for r in recs]


def cell(recs):
    vals = [r["top1"] for r in recs]
    if not vals:
        return "not run"
    sd = " ± %.2f" % statistics.stdev(vals) if len(vals) > 1 else ""
    return "%.2f%s (%d seed%s)" % (statistics.mean(vals), sd, len(vals), "s" * (len(vals) != 1))


def cpu_cell(recs):
    return "%.1f" % (statistics.mean(r["cpu_s"] for r in recs) / 60) if recs else "—"


def section(records=RECORDS):
    """The report's lines: fp32 and bf16 top-1, bf16 - fp32 with its interval and the TOST verdict."""
    by = load(records)
    lines = ["### The quickstart at bf16\n",
             "`configs/quickstart.json` (the README's main job) trained at each precision for seeds 0 to %d (one"
             " thread, `python3 results/quickstart_precision.py run`), each final model evaluated once on the 10 000"
             " test images. Seed s starts from the same weights and batches at both precisions, so the interval"
             " resamples seeds as pairs, and test images (the same for every run). bf16 matches fp32 when two"
             " one-sided tests put bf16 − fp32 within ±%.1f points (a family of one).\n" % (SEEDS - 1, verdicts.MARGIN),
             "| precision | test top-1 | CPU min per run | Δ bf16 − fp32 [95 % CI] | verdict | uncertainty |",
             "|---|---|---|---|---|---|"]
    fp32, bf16 = by["fp32"], by["bf16"]
    lines.append("| fp32 | %s | %s | | | |" % (cell(fp32), cpu_cell(fp32)))
    if len(fp32) < 2 or len(bf16) < 2:
        lines.append("| bf16 | %s | %s | — | needs 2 seeds a side | — |\n" % (cell(bf16), cpu_cell(bf16)))
        return lines
    seeds = sorted({r["seed"] for r in bf16} & {r["seed"] for r in fp32})  # seed s at both precisions
    pick = lambda recs: runs_of(sorted((r for r in recs if r["seed"] in seeds), key=lambda r: r["seed"]))  # noqa: E731
    if all(b is not None for _, b in pick(bf16) + pick(fp32)):
        e = verdicts.bootstrap([[b for _, b in pick(bf16)], [b for _, b in pick(fp32)]], [1, -1], paired_seeds=True)
    else:
        e = verdicts.estimate([runs_of(bf16), runs_of(fp32)], [1, -1])
    j = verdicts.judge([(e, None)])[0]
    if j["verdict"].startswith("no effect"):
        v = "matches fp32: equivalent within ±%.1f (TOST p %.3g)" % (verdicts.MARGIN, j["p_tost"])
    elif j["verdict"] == "inconclusive":
        v = "equivalence not shown (TOST p %.2f)" % j["p_tost"]
    else:
        v = "%s (p %.3g)" % (j["verdict"], j["p"])
    form = ("paired bootstrap (images; seeds paired, %d pairs)" % len(seeds)) if e.get("seeds_paired") else \
        "seeds + test set, analytic (unpaired)"
    lines.append("| bf16 | %s | %s | %s | %s | %s |" % (
        cell(bf16), cpu_cell(bf16), report_claims.fmt_interval(j), v, form + ("; %s" % j["flag"] if j["flag"] else "")))
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["run", "table"])
    ap.add_argument("--seeds", type=int, default=SEEDS)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.what == "table":
        print("\n".join(section()))
        return
    for s in range(a.seeds):  # seed by seed, both precisions: a stopped launcher leaves pairs
        for p in PRECISIONS:
            if os.path.exists(record_path(p, s)):
                continue
            rec = run_one(p, s, a.threads)
            print("%s seed %d: exit %d, %.0f CPU s, test top-1 %s" % (p, s, rec["exit_code"], rec["cpu_s"],
                                                                     rec.get("top1")), flush=True)


if __name__ == "__main__":
    main()
