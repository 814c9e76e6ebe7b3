"""The fixed-budget rows of claims 2 to 5 (docs/RESULTS.md, "Protocol").

The study's 40 CPU-hours cannot train every ablation at the count the sweeps would need: DeiT alone
has 34 such runs, and its sweep still gained 1.15 points from 50 to 100 epochs. So claim 1 (and its
PyTorch twin) trains at the budget cap, and the comparisons of claims 2 to 5 are made at one fixed
budget, EPOCHS epochs, with their own controls (softmax and SimA DeiT, SimA XCiT) at the same budget.
A difference between two rows here is a difference at that budget, which the report says.

The disputed claims 2 (one head) and 3 (a ReLU MLP, with its softmax control) are measured again at
the architecture's converged count, CONVERGED_EPOCHS (DeiT's budget cap, sweep.BUDGET_CAP, the cap of
claim 1's sweep), with their reference rows (softmax and SimA DeiT) at the same protocol: rows
e100_<row>. BUDGETS maps each budget to its rows; a row's budget is its prefix.

A row e<E>_<row> trains configs/paper/<row>.json on the validation split's 50 000 training images for
E epochs and evaluates the 10 000 held-out ones after every epoch (the curves the time-to-accuracy
table reads, results/tta.py); after the last epoch, sima-eval evaluates the test set once on the
final weights (the record's top1, and its per-image correctness as `correct_hex`, `sima-eval
--per-image`, for the paired statistics of results/stats.py). No setting is chosen from these curves.

    python3 results/reproduce.py run --rows e50_deit_sima,e50_deit_softmax
"""
import json
import os

import parked
import precision_rows
import sweep
from runner import (BIN, INTERRUPTED, ROOT, diverged, epoch_records, run_logged, run_sitting, scaler_state, spent_totals,
                    user_command)

EPOCHS = 50  # half the supervised budget cap (sweep.BUDGET_CAP)
PREFIX = "e%d_" % EPOCHS
CONVERGED_EPOCHS = sweep.BUDGET_CAP["deit_sima"]  # claims 2 and 3 again, at DeiT's converged (capped) count
CONVERGED_PREFIX = "e%d_" % CONVERGED_EPOCHS
# (row, claims, seeds): each row's config is configs/paper/<row>.json.
ROWS = [  # claim 5 (with the time-to-accuracy curves) first, then claims 2, 3 and 4
    ("deit_softmax", [2, 3, 5], 3),
    ("deit_sima", [2, 3, 5], 3),
    ("deit_relu_attn", [5], 2),
    ("deit_soft", [5], 2),
    ("deit_linear_elu", [5], 2),
    ("deit_cosformer", [5], 2),
    ("deit_cosformer_cos1d", [5], 2),
    ("deit_performer", [5], 2),
    ("deit_nystromformer", [5], 2),
    ("deit_efficient", [5], 2),
    ("deit_linformer", [5], 2),
    ("deit_softmax_1head", [2], 3),
    ("deit_sima_1head", [2], 3),
    ("deit_sima_relu_mlp", [3], 2),
    ("deit_softmax_relu_mlp", [3], 2),  # control: is claim 3's ReLU effect about SimA at all?
    ("xcit_sima", [4], 2),  # claim 4 on XCiT, as the paper (section 4: XCiT-S12/16 -> SimA)
    ("xcit_sima_l2", [4], 2),
    ("xcit_sima_nonorm", [4], 2),
]
# Claims 2 and 3 at convergence, >= 3 seeds a row: each SimA row beside its reference first, so that
# a verdict can form from the first runs (`reproduce.py run --by-seed` takes every row's seed 0 first).
ROWS_CONVERGED = [
    ("deit_sima", [2, 3], 3),
    ("deit_sima_1head", [2], 3),
    ("deit_sima_relu_mlp", [3], 3),
    ("deit_softmax", [2, 3], 3),
    ("deit_softmax_1head", [2], 3),
    ("deit_softmax_relu_mlp", [3], 3),
]
BUDGETS = {EPOCHS: ROWS, CONVERGED_EPOCHS: ROWS_CONVERGED}


def all_rows():
    """(e<E>_<row>, claims, seeds) of every budget, the first budget first."""
    return [("e%d_%s" % (e, r), claims, seeds) for e, rows in BUDGETS.items() for r, claims, seeds in rows]


def prefix_of(epochs):
    return "e%d_" % epochs


def epochs_of(row):
    """e100_deit_sima (or its precision row fp16_e100_deit_sima) -> 100; a row of no budget -> None."""
    row = precision_rows.fp32_row(row)
    for e in BUDGETS:
        if row.startswith(prefix_of(e)):
            return e
    return None


def base_row(row):
    """e50_deit_sima, e100_deit_sima or fp16_e50_deit_sima -> deit_sima (its config's name)."""
    row = precision_rows.fp32_row(row)
    e = epochs_of(row)
    return row[len(prefix_of(e)):] if e else row


def test_eval_argv(checkpoint, smoke):
    """sima-eval on the test split, once, on the run's final weights, with each image's correctness."""
    argv = [os.path.join(BIN, "sima-eval"), "--checkpoint", checkpoint, "--json", "--per-image"]
    return argv + (["--limit", "128"] if smoke else [])


def run(row, seed, env, out, records, smoke):
    """Trains (or resumes) one seed of a fixed-budget row; returns the fields of its record, or None
    when the trainer was interrupted (its train state is kept for the next sitting)."""
    base, budget = base_row(row), epochs_of(row)
    epochs = 1 if smoke else budget
    resume = parked.start_or_resume(records, out, epochs)
    extra = precision_rows.sets(row) + list(smoke)  # a precision row: --set train.precision=<p>
    argv = sweep.argv_for(BIN, ROOT, base, budget, out, resume, extra, seed=seed)
    threads = int(env.get("OMP_NUM_THREADS", "1"))
    code, last, spent = run_sitting(argv, env, out, resume)
    if code == INTERRUPTED:
        return None
    rec = {"command": user_command(sweep.argv_for(BIN, ROOT, base, budget, out, False, extra, seed=seed), threads),
           "precision": precision_rows.precision_of(row, os.path.join(ROOT, "configs", "paper", base + ".json")),
           "split": "validation", "validation": sweep.VALIDATION, "validation_seed": sweep.VALIDATION_SEED,
           "epochs_from": "fixed budget (%d epochs%s)" % (
               budget, ", DeiT's converged count: its sweep's budget cap" if budget == CONVERGED_EPOCHS else ""), "resumed": resume, **spent_totals(spent),
           "exit_code": code, "epochs": sweep.epoch_rows(epoch_records(out)),
           "model": sweep.model_of(ROOT, base)}
    if scaler_state(out):  # float16: the loss scale and the overflowed steps skipped, at the last logged step
        rec["loss_scaler"] = scaler_state(out)
    if code != 0:
        rec["error"] = last
        rec["diverged"] = diverged(last)
        return rec
    return evaluate_test(rec, out, env, threads, smoke)


def evaluate_test(rec, out, env, threads, smoke, keep_top1=False):
    """sima-eval on the test split of the run's final weights (out/model.safetensors): rec["eval"], each
    image's correctness (correct_hex) and the record's top1; with keep_top1 (a claim-1 run, whose top1 is
    its trainer's last evaluation) sima-eval's top-1 goes to rec["eval"]["top1"] and a failed evaluation
    leaves the run's outcome alone."""
    eargv = test_eval_argv(os.path.join(out, "model.safetensors"), smoke)
    ecode, ewall, ecpu, elast = run_logged(eargv, env, out + ".test.json")
    rec["eval"] = {"command": user_command(eargv, threads), "wall_s": round(ewall, 1), "cpu_s": round(ecpu, 1),
                   "exit_code": ecode}
    if ecode != 0:
        if keep_top1:
            rec["eval"]["error"] = elast
        else:
            rec["exit_code"], rec["error"] = ecode, "test evaluation failed: " + elast
        return rec
    with open(out + ".test.json") as f:
        res = json.loads(f.read().strip().splitlines()[-1])
    if keep_top1:
        rec["eval"]["top1"] = res["top1"]
    else:
        rec["top1"] = res["top1"]
    rec["eval"]["top5"], rec["eval"]["count"] = res.get("top5"), res.get("count")
    if "correct_hex" in res:  # image i right: bit i (results/stats.py, bits_from_hex)
        rec["correct_hex"] = res["correct_hex"]
    return rec
