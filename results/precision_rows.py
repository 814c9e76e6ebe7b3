"""The rows that train another row's recipe at a lower training precision (docs/precision.md,
"Training precisions"). A row <p>_<row> is row <row> (its config, epochs, split, seeds and
evaluation) run with `--set train.precision=<p>`; nothing else changes, so its seed s starts from the
same weights and batches as <row>'s seed s. Two questions of the mixed-precision issue:

- claim 4 under float16: the SimA paper trained under CUDA float16 autocast and reports that without
  the l1 normalisation of q and k "none of our several trials converged" (NaN losses); the study's
  claim 4 rows (results/fixed.py, XCiT at 50 epochs) trained in float32. fp16_e50_xcit_sima* run
  them again at fp16, with the dynamic loss scaler (skipped steps and the scale in the records).
- bf16 accuracy: bf16_cvt_sima is claim 1's CvT SimA row at bf16; bf16 matches fp32 when the
  equivalence test (TOST, +/- verdicts.MARGIN points) says so.

    python3 results/reproduce.py run --rows fp16_e50_xcit_sima_nonorm --jobs 1 --threads 1
"""
import json
import re

PRECISIONS = ("bf16", "fp16")  # besides fp32, the default of every config in configs/paper
# (precision, the float32 row it repeats, claims, seeds)
ROWS = [
    ("fp16", "e50_xcit_sima_nonorm", [4], 2),  # the paper's failing case first: it answers the question
    ("fp16", "e50_xcit_sima", [4], 2),
    ("fp16", "e50_xcit_sima_l2", [4], 2),
    ("bf16", "cvt_sima", [1], 3),
]
# Training records that matter at float16: the scaler's state after each epoch, and the epoch's
# largest magnitude rounded to float16 in a forward pass, overall and in its attention cores'
# products (train/loop/loop.cpp).
SCALER_KEYS = ("loss_scale", "overflow_skipped_steps", "fp16_forward_peak", "fp16_forward_peak_attention")


def name(precision, row):
    return "%s_%s" % (precision, row)


def all_rows():
    """(row name, the float32 row, claims, seeds) of every precision row."""
    return [(name(p, r), r, claims, seeds) for p, r, claims, seeds in ROWS]


def split(row):
    """fp16_e50_xcit_sima -> ("fp16", "e50_xcit_sima"); a row without a precision prefix -> (None, row)."""
    head, _, rest = row.partition("_")
    return (head, rest) if head in PRECISIONS and rest else (None, row)


def fp32_row(row):
    """The float32 row a precision row repeats (the row itself otherwise)."""
    return split(row)[1]


def sets(row):
    """The trainer's extra flags of a row: --set train.precision=<p> for a precision row, else none."""
    p = split(row)[0]
    return ["--set", "train.precision=%s" % p] if p else []


def precision_of(row, config_path=None):
    """The training precision a row runs at: its prefix's, else its config's train.precision (the file
    at config_path), else fp32."""
    p = split(row)[0]
    if p or not config_path:
        return p or "fp32"
    with open(config_path) as f:
        return json.load(f).get("train", {}).get("precision") or "fp32"


def record_precision(rec):
    """The precision a run record trained at: its `precision` field (records from this module on),
    else the command's `--set train.precision=`, else fp32 (the records made before precisions existed
    ran configs without one)."""
    if rec.get("precision"):
        return rec["precision"]
    m = re.search(r"train\.precision=(\w+)", rec.get("command", ""))
    return m.group(1) if m else "fp32"
