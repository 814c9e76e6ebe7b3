"""The fixed-budget rows of claims 2 to 5 (docs/RESULTS.md, "Protocol").

The study's 40 CPU-hours cannot train every ablation at the count the sweeps would need: DeiT alone
has 34 such runs, and its sweep still gained 1.15 points from 50 to 100 epochs. So claim 1 (and its
PyTorch twin) trains at the budget cap, and the comparisons of claims 2 to 5 are made at one fixed
budget, EPOCHS epochs, with their own controls (softmax and SimA DeiT, SimA XCiT) at the same budget.
A difference between two rows here is a difference at that budget, which the report says.

A row e50_<row> trains configs/paper/<row>.json on the validation split's 50 000 training images for
EPOCHS epochs and evaluates the 10 000 held-out ones after every epoch (the curves the time-to-
accuracy table reads, results/tta.py); after the last epoch, sima-eval evaluates the test set once on
the final weights (the record's top1). No setting is chosen from these curves.

    python3 results/reproduce.py run --rows e50_deit_sima,e50_deit_softmax
"""
import json
import os

import parked
import sweep
from runner import BIN, INTERRUPTED, ROOT, epoch_records, run_logged, run_sitting, spent_totals, user_command

EPOCHS = 50  # half the supervised budget cap (sweep.BUDGET_CAP)
PREFIX = "e%d_" % EPOCHS
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


def base_row(row):
    """e50_deit_sima -> deit_sima (its config's name)."""
    return row[len(PREFIX):] if row.startswith(PREFIX) else row


def test_eval_argv(checkpoint, smoke):
    """sima-eval on the test split, once, on the run's final weights."""
    argv = [os.path.join(BIN, "sima-eval"), "--checkpoint", checkpoint, "--json"]
    return argv + (["--limit", "128"] if smoke else [])


def run(row, seed, env, out, records, smoke):
    """Trains (or resumes) one seed of a fixed-budget row; returns the fields of its record, or None
    when the trainer was interrupted (its train state is kept for the next sitting)."""
    base = base_row(row)
    epochs = 1 if smoke else EPOCHS
    resume = parked.start_or_resume(records, out, epochs)
    argv = sweep.argv_for(BIN, ROOT, base, EPOCHS, out, resume, smoke, seed=seed)
    threads = int(env.get("OMP_NUM_THREADS", "1"))
    code, last, spent = run_sitting(argv, env, out, resume)
    if code == INTERRUPTED:
        return None
    rec = {"command": user_command(sweep.argv_for(BIN, ROOT, base, EPOCHS, out, False, smoke, seed=seed), threads),
           "split": "validation", "validation": sweep.VALIDATION, "validation_seed": sweep.VALIDATION_SEED,
           "epochs_from": "fixed budget (%d epochs)" % EPOCHS, "resumed": resume, **spent_totals(spent),
           "exit_code": code, "epochs": sweep.epoch_rows(epoch_records(out)),
           "model": sweep.model_of(ROOT, base)}
    if code != 0:
        rec["error"] = last
        rec["diverged"] = "not finite" in last or "non-finite" in last
        return rec
    eargv = test_eval_argv(os.path.join(out, "model.safetensors"), smoke)
    ecode, ewall, ecpu, elast = run_logged(eargv, env, out + ".test.json")
    rec["eval"] = {"command": user_command(eargv, threads), "wall_s": round(ewall, 1), "cpu_s": round(ecpu, 1),
                   "exit_code": ecode}
    if ecode != 0:
        rec["exit_code"], rec["error"] = ecode, "test evaluation failed: " + elast
        return rec
    with open(out + ".test.json") as f:
        res = json.loads(f.read().strip().splitlines()[-1])
    rec["top1"] = res["top1"]
    rec["eval"]["top5"], rec["eval"]["count"] = res.get("top5"), res.get("count")
    return rec
