"""DINO's frozen features scored by sima-eval, and what they have to beat.

One sima-eval run per kind of features extracts them once and gives both scores: the weighted
k-NN (k = 10, 20, 100; DINO's temperature 0.07) and a linear probe (SGD, 20 epochs). The kinds:
    model   the teacher backbone's class token after the final norm (what DINO learned)
    init    the same architecture freshly initialised (seed 0): what the architecture gives untrained
    pixels  the raw pixels, standardised
A DINO sweep point is scored on the validation split (bank and probe set: the 50 000 images it
pretrained on; queries: the 10 000 held out), and its 20-NN on `model` is the sweep's criterion
(results/sweep.py). A final DINO row (claim 6) is scored on the test set, once with the last class
token and once with both class-attention tokens concatenated (its record's eval and eval_blocks2).

Each evaluation is a dict {"command", "wall_s", "cpu_s", "exit_code", and "result" (sima-eval's JSON)
or "error"}; `scores` reads the 20-NN and the probe's top-1 from it.
"""
import json
import os

import sweep
from runner import ROOT, run_logged, user_command

BASELINES = ("init", "pixels")
# The study's XCiT has 2 class-attention blocks; the paper evaluates the class tokens of the last four
# blocks concatenated (DINO's eval_linear n_last_blocks), so a DINO teacher is scored with the last
# token and with both class-attention tokens (--feature-blocks 2).
ALL_CLASS_BLOCKS = 2
BLOCKS_KEY = "eval_blocks%d" % ALL_CLASS_BLOCKS  # a final DINO record's key for that evaluation
VALIDATION_SPLIT = ["--validation", str(sweep.VALIDATION), "--validation-seed", str(sweep.VALIDATION_SEED)]
SMOKE_ARGS = ["--train-limit", "512", "--limit", "128", "--probe-epochs", "2"]


def argv(bin_dir, checkpoint, split, features="model", smoke=False, blocks=None):
    """sima-eval's k-NN and linear probe on one kind of frozen features. split: VALIDATION_SPLIT, or
    [] for the test set. blocks: the class tokens of the last `blocks` blocks concatenated
    (--feature-blocks; None: sima-eval's default, the last one)."""
    return ([os.path.join(bin_dir, "sima-eval"), "--checkpoint", checkpoint, "--knn",
             "--k", ",".join(map(str, sweep.KNN_KS)), "--linear-probe", "--json"] + list(split) +
            ([] if features == "model" else ["--features", features]) + (SMOKE_ARGS if smoke else []) +
            ([] if blocks is None else ["--feature-blocks", str(blocks)]))


def evaluate(args, env, threads, log):
    """Runs one sima-eval (its JSON line into `log`) and returns its evaluation dict."""
    code, wall, cpu, last = run_logged(args, env, log)
    ev = {"command": user_command(args, threads), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
          "exit_code": code}
    if code != 0:
        ev["error"] = last
        return ev
    with open(log) as f:
        res = json.loads(f.read().strip().splitlines()[-1])
    if os.path.isabs(res.get("checkpoint", "")):  # records name files inside the repository only
        res["checkpoint"] = os.path.relpath(res["checkpoint"], ROOT)
    ev["result"] = res
    return ev


def baselines(bin_dir, checkpoint, split, env, threads, log_prefix, smoke=False):
    """{"init": evaluation, "pixels": evaluation} on the same split as the features they are set against."""
    return {f: evaluate(argv(bin_dir, checkpoint, split, f, smoke), env, threads, "%s_%s.json" % (log_prefix, f))
            for f in BASELINES}


def scores(ev):
    """(20-NN top-1, linear probe top-1) of an evaluation; None for what it does not have."""
    res = (ev or {}).get("result") or {}
    return (sweep.knn_top1(res) if "knn" in res else None), res.get("linear_probe", {}).get("top1")
