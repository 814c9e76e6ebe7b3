#!/usr/bin/env python3
"""How close the forward pass of XCiT SimA starts to float16's limit, with each normalisation of q and k,
at this study's scale and at the paper's.

Claim 4's float16 rows (results/precision_rows.py) train the study's XCiT (48 wide, 4 blocks of 4 heads
of 12 channels, 49 tokens) and log `fp16_forward_peak`, the largest magnitude a training forward pass
rounded to float16 (docs/precision.md). The paper's runs were XCiT-S12/16: 384 wide, 12 blocks of 8
heads of 48 channels, 196 tokens (224-pixel images, patch 16). Without normalisation, SimA's products
sum over the tokens and the channels, so their size grows with both. This probe measures the forward
peak of both scales at initialisation, which needs no training: STEPS steps of each config at fp16
(`train.max_steps`; the warm-up's first steps move the weights by a learning rate of about 1e-6), with
the step records' peaks (`train.log_every` 1), overall and in the attention cores' products. The paper's scale runs on Fashion-MNIST resized to 224
pixels (`augment.crop` random_resized_crop to `model.img_size` 224), the same in every other respect as
the XCiT-S12/16 the paper trained (`models/xcit.cpp`'s xcit_small_12_p16 shape); batch BATCH, one thread.

    python3 results/fp16_headroom.py run       # a recorded probe is not run again
    python3 results/fp16_headroom.py table

Records: results/runs/fp16_headroom/<scale>_<norm>.json ({"command", "scale", "norm", "steps": [{"step",
"loss", "fp16_forward_peak"}], "cpu_s", "wall_s", ...}). Run folders go to runs/fp16_headroom/ (not
committed) and are deleted once recorded; SIMA_BIN_DIR chooses the binaries.
"""
import argparse
import datetime
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import (BIN, PEAK_KEYS, ROOT, binary_version, host, git_commit, run_sitting,  # noqa: E402
                    spent_totals, user_command, write_json)

RECORDS = os.path.join(ROOT, "results", "runs", "fp16_headroom")
OUT = os.path.join(ROOT, "runs", "fp16_headroom")
FP16_MAX = 65504.0  # the largest float16; 65520 and above round to inf
STEPS, BATCH = 3, 16
# (norm, its label, the config of claim 4's row)
NORMS = (("l1", "ℓ1 (SimA)", "xcit_sima"), ("l2", "ℓ2", "xcit_sima_l2"), ("none", "none", "xcit_sima_nonorm"))
# (scale, its description, the model's --set overrides of the configs)
SCALES = (
    ("study", "this study's XCiT: 48 wide, 4 blocks × 4 heads of 12, 49 tokens (28 px, patch 4)", []),
    ("xcit_s12_16", "the paper's XCiT-S12/16: 384 wide, 12 blocks × 8 heads of 48, 196 tokens (224 px, patch 16)",
     ["model.embed_dim=384", "model.depth=12", "model.num_heads=8", "model.patch_size=16", "model.img_size=224",
      "augment.crop=random_resized_crop"]),
)


def record_path(scale, norm, records=None):
    return os.path.join(records or RECORDS, "%s_%s.json" % (scale, norm))


def train_argv(config, sets, out):
    argv = [os.path.join(BIN, "sima-train"), "--config", os.path.join(ROOT, "configs", "paper", config + ".json")]
    for s in sets + ["train.precision=fp16", "train.max_steps=%d" % STEPS, "train.log_every=1",
                     "data.batch_size=%d" % BATCH, "data.validation=10000", "data.validation_seed=0"]:
        argv += ["--set", s]
    return argv + ["--out", out, "--quiet"]


def step_records(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    return [{k: r.get(k) for k in ("step", "loss") + PEAK_KEYS} for r in recs if r.get("kind") == "step"]


def run_one(scale, sets, norm, config):
    """Runs one probe from scratch at one thread and writes its record."""
    out = os.path.join(OUT, "%s_%s" % (scale, norm))
    os.makedirs(OUT, exist_ok=True)
    argv = train_argv(config, sets, out)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    code, last, spent = run_sitting(argv, dict(os.environ, OMP_NUM_THREADS="1"), out, False)
    rec = {"command": user_command(argv, 1), "scale": scale, "norm": norm, "commit": git_commit(),
           "binary": binary_version(BIN), "date": started, "threads": 1, **host(),
           "exit_code": code, "steps": step_records(out)}
    rec.update(spent_totals(spent))
    if code != 0:
        rec["error"] = last
    write_json(record_path(scale, norm), rec)
    shutil.rmtree(out, ignore_errors=True)  # its train state (about 0.4 GB at the paper's scale) is of no further use
    return rec


def load(records=None):
    """{(scale, norm): record} of the probes recorded."""
    out = {}
    for scale, _, _ in SCALES:
        for norm, _, _ in NORMS:
            path = record_path(scale, norm, records)
            if os.path.exists(path):
                with open(path) as f:
                    out[(scale, norm)] = json.load(f)
    return out


def peak(rec, key="fp16_forward_peak"):
    """The largest forward peak over a probe's steps (key: the attention cores' part with
    fp16_forward_peak_attention), or None (a failed probe, or no peak logged)."""
    vals = [s[key] for s in rec.get("steps", []) if s.get(key) is not None]
    return max(vals) if vals else None


def fmt(x):
    return ("%.0f" if x >= 100 else "%.3g") % x


def table(recs):
    """The report's table: each scale's forward peak per normalisation and float16's headroom over it."""
    lines = ["| model | " + " | ".join("%s: forward peak (attention cores), headroom" % label for _, label, _ in NORMS)
             + " |",
             "|---" * (len(NORMS) + 1) + "|"]
    for scale, what, _ in SCALES:
        cells = []
        for norm, _, _ in NORMS:
            r = recs.get((scale, norm))
            p = peak(r) if r else None
            if r is None:
                cells.append("not run")
            elif p is None:
                cells.append("failed: %s" % r.get("error", "no peak logged"))
            else:
                a = peak(r, "fp16_forward_peak_attention")
                cells.append("%s (%s), %.0f×" % (fmt(p), fmt(a) if a is not None else "—", FP16_MAX / p))
        lines.append("| %s | %s |" % (what, " | ".join(cells)))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["run", "table"])
    a = ap.parse_args()
    if a.what == "run":
        for scale, _, sets in SCALES:
            for norm, _, config in NORMS:
                if os.path.exists(record_path(scale, norm)):
                    continue
                r = run_one(scale, sets, norm, config)
                print("%s %s: peak %s, %.0f CPU s" % (scale, norm, peak(r), r["cpu_s"]), flush=True)
    print("\n".join(table(load())))


if __name__ == "__main__":
    main()
