"""Time to accuracy (what SimA is for): for each attention on DeiT, the wall time at two threads to
first reach 90 % and 92 % validation top-1, and the training images per second.

The epochs come from claim 5's own runs (results/fixed.py): every seed of e50_deit_<attention>,
trained on the validation split and evaluated after every epoch. The seconds per epoch at two threads
come from short runs per attention, tta_deit_<attention>: TIMING_EPOCHS epochs of the same config
and split, training seed 0, alone on the machine at two threads, repeated in ROUNDS rounds (the row's
"seeds" 0, 1, ... number the rounds; each round trains the same seed 0, so only the timing differs).
`run` makes a round of every row before the next, so the attentions alternate and a slow spell of a
shared host falls on one round, not on one attention. The figure is the median of the trainer's
epoch_seconds after the first epoch of each round (which warms up; the evaluations between epochs are
not in it), pooled over the rounds. The time to a target is the mean over seeds of the epochs to
reach it, times that median.

Why the 50-epoch runs are not timed themselves: they run two at a time at one thread each, like every
training row, so their wall time is not a two-thread run's. And a run at two threads does not repeat
the one-thread run bit for bit (the GEMMs sum in another order), so it would reach a target at an
epoch of its own anyway: how many epochs a recipe needs is the recipe's, and its spread over seeds
is in the table.

    python3 results/reproduce.py run --rows tta_deit_sima,tta_deit_softmax    # or every tta_ row

Records: results/runs/tta_<row>/s0.json. The test set is never read here.
"""
import os
import shutil
import statistics

import parked
import sweep
from runner import BIN, ROOT, epoch_records, run_logged, user_command

THREADS = 2
TIMING_EPOCHS = 3
ROUNDS = 2  # one was too few on a shared host whose epochs drifted by up to a quarter between spells
TARGETS = (90.0, 92.0)
# The DeiT rows of claim 5, in its order.
ROWS = ["deit_softmax", "deit_sima", "deit_relu_attn", "deit_soft", "deit_linear_elu", "deit_cosformer",
        "deit_cosformer_cos1d", "deit_performer", "deit_nystromformer", "deit_efficient", "deit_linformer"]
PREFIX = "tta_"


def base_row(row):
    """tta_deit_sima -> deit_sima."""
    return row[len(PREFIX):]


def train_images():
    return 60000 - sweep.VALIDATION


def run_timing(row, env, out, records, smoke):
    """The timing run of a tta_ row: TIMING_EPOCHS epochs at THREADS threads, alone; a cut-off run
    starts over (it is short)."""
    base = base_row(row)
    env = dict(env, OMP_NUM_THREADS=str(THREADS))
    parked.drop(records, out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    argv = sweep.argv_for(BIN, ROOT, base, TIMING_EPOCHS, out, False, smoke)
    code, wall, cpu, last = run_logged(argv, env, out + ".log")
    rec = {"command": user_command(argv, THREADS), "threads": THREADS, "split": "validation",
           "validation": sweep.VALIDATION, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit_code": code,
           "epochs": sweep.epoch_rows(epoch_records(out)), "model": sweep.model_of(ROOT, base)}
    if code != 0:
        rec["error"] = last
    return rec


def timed_epochs(timings, key="epoch_seconds"):
    """The epoch_seconds (or another per-epoch figure, `key`, such as epoch_cpu_seconds) the figure is
    taken from, over the rounds' records `timings`: those after each finished round's first epoch (its
    only one if it ran one); [] when no round finished. Epochs without the figure are left out."""
    secs = []
    for timing in timings:
        if timing and timing.get("exit_code") == 0 and timing.get("epochs"):
            one = [e[key] for e in timing["epochs"] if e.get(key) is not None]
            secs += one[1:] or one
    return secs


def summary(runs, timings):
    """{"s_per_epoch", "s_range" (the timed epochs' least and most), "rounds" (how many finished),
    "img_per_s" (None when not timed), "targets": {90.0: (reached, of, mean epochs, sd or None,
    seconds or None), ...} (None when no seed of the fixed-budget records `runs` finished)}: the
    time-to-accuracy row of one attention, `timings` its rounds' timing records."""
    secs = timed_epochs(timings)
    spe = statistics.median(secs) if secs else None
    out = {"s_per_epoch": spe, "s_range": (min(secs), max(secs)) if len(secs) > 1 else None,
           "rounds": sum(1 for r in timings if timed_epochs([r])),
           "img_per_s": train_images() / spe if spe else None, "targets": None}
    ok = [r for r in runs if r.get("exit_code") == 0 and r.get("epochs")]
    if not ok:
        return out
    out["targets"] = {}
    for t in TARGETS:
        hit = [a for a in (sweep.epoch_reaching(r, t) for r in ok) if a is not None]
        if not hit:
            out["targets"][t] = (0, len(ok), None, None, None)
            continue
        mean = statistics.mean(hit)
        out["targets"][t] = (len(hit), len(ok), mean, statistics.stdev(hit) if len(hit) > 1 else None,
                             mean * spe if spe else None)
    return out
