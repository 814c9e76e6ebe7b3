"""Time to accuracy (what SimA is for): for each attention on DeiT, the wall time at two threads to
first reach 90 % and 92 % validation top-1, and the training images per second, from one run per
variant on the validation split (seed 0, the epochs DeiT's sweep chose, evaluated after every epoch).

    python3 results/reproduce.py run --rows tta_deit_sima,tta_deit_softmax    # or every tta_ row

The rows run one at a time at two threads, after the single-threaded training rows, so nothing else
shares the machine while they are timed. The wall time is the training's (the trainer's
epoch_seconds, summed up to the first epoch at the target); the evaluations between epochs are not
in it. Records: results/runs/tta_<row>/s0.json. The test set is never read here.
"""
import sweep

THREADS = 2
TARGETS = (90.0, 92.0)
# The DeiT rows of claims 1 and 5, in claim 5's order.
ROWS = ["deit_softmax", "deit_sima", "deit_relu_attn", "deit_soft", "deit_linear_elu", "deit_cosformer",
        "deit_cosformer_cos1d", "deit_performer", "deit_nystromformer", "deit_efficient", "deit_linformer"]
PREFIX = "tta_"


def base_row(row):
    """tta_deit_sima -> deit_sima."""
    return row[len(PREFIX):]


def train_images():
    return 60000 - sweep.VALIDATION


def summary(rec):
    """{"targets": {90.0: (epoch, wall s) or None, ...}, "img_per_s", "epochs"} of a finished record,
    or None when the run failed or has no epochs."""
    epochs = rec.get("epochs") or []
    if rec.get("exit_code") != 0 or not epochs:
        return None
    out = {"targets": {}, "epochs": len(epochs)}
    for t in TARGETS:
        at = sweep.epoch_reaching(rec, t)
        out["targets"][t] = (at, sum(e["epoch_seconds"] for e in epochs[:at])) if at is not None else None
    out["img_per_s"] = train_images() * len(epochs) / sum(e["epoch_seconds"] for e in epochs)
    return out
