"""docs/RESULTS.md's section on DINO's recipe sweep (results/dino_sweep.py): each point's changes to the
paper rows' recipe, its budget and its teacher's frozen features on the validation split, beside what a
supervised XCiT of the same size gives (the diagnostic record) and the raw pixels."""
import glob
import json
import math
import os

import frozen_eval

DIAGNOSTIC = "diagnostic_supervised_xcit_sima.json"
OUT_DIM = 4096  # the DINO rows' dino.out_dim: a loss of ln(OUT_DIM) is the uniform output


def load_records(runs):
    """(sweep points sorted by file name, the diagnostic record or None) from results/runs/sweeps/dino_recipe/."""
    d = os.path.join(runs, "sweeps", "dino_recipe")
    points, diag = [], None
    for p in sorted(glob.glob(os.path.join(d, "*.json"))):
        with open(p) as f:
            rec = json.load(f)
        if os.path.basename(p) == DIAGNOSTIC:
            diag = rec
        else:
            points.append(rec)
    return points, diag


def cells(evals):
    """'20-NN / probe' for the last class token and for both class-attention tokens."""
    out = []
    for b in ("blocks1", "blocks2"):
        knn, lp = frozen_eval.scores((evals or {}).get(b))
        out.append("—" if knn is None else "%.2f / %.2f" % (knn, lp) if lp is not None else "%.2f" % knn)
    return out


def changes(rec):
    s = rec.get("settings") or {}
    return ", ".join("`%s`=%s" % (k.replace("dino.", ""), json.dumps(v)) for k, v in s.items()) or "none (the paper rows' recipe)"


def best(points):
    """(record, blocks key, 20-NN) of the best finished point and feature choice, or None."""
    scored = [(frozen_eval.scores(r["evals"][b])[0], r, b) for r in points if r.get("exit_code") == 0
              for b in ("blocks1", "blocks2") if r.get("evals", {}).get(b)]
    scored = [s for s in scored if s[0] is not None]
    if not scored:
        return None
    knn, r, b = max(scored, key=lambda s: s[0])
    return r, b, knn


def dino_recipe_section(runs, out):
    """Appends the section (nothing when no point is recorded)."""
    points, diag = load_records(runs)
    if not points and not diag:
        return
    out.append("## DINO's recipe at 28 pixels (validation sweep)\n")
    out.append("Short DINO runs of the XCiT SimA teacher (`configs/paper/dino_xcit_sima.json` with the changes listed,"
               " `python3 results/dino_sweep.py run`), pretrained on the validation split's training images and judged"
               " by the weighted 20-NN of the teacher's frozen features on the 10 000 held-out images; the test set is"
               " not read. Each cell: 20-NN / linear probe (top-1 %), with the last class token (`--feature-blocks 1`)"
               " and with the tokens of both class-attention blocks concatenated (`--feature-blocks 2`).\n")
    out.append("| point | changes | epochs × images | CPU (min) | last token | 2 class-attention tokens |")
    out.append("|---|---|---|---|---|---|")
    for r in points:
        if r.get("exit_code"):
            out.append("| %s | %s | %d × %d | — | failed: %s | — |" % (r["point"], changes(r), r["epochs_planned"],
                                                                      r["train_subset"], r.get("error", "")))
            continue
        out.append("| %s | %s | %d × %d | %.0f | %s | %s |" % ((r["point"], changes(r), r["epochs_planned"],
                                                             r["train_subset"], r["cpu_s"] / 60.0) + tuple(cells(r.get("evals")))))
    if diag:
        out.append("| supervised XCiT SimA (diagnostic) | %s | %s | — | %s | %s |" % (
            (diag.get("what", ""), diag.get("trained", "")) + tuple(cells(diag.get("evals")))))
        pix = frozen_eval.scores((diag.get("baselines") or {}).get("pixels"))
        if pix[0] is not None:
            out.append("| raw pixels | standardised | — | — | %.2f / %.2f | — |" % pix)
    out.append("")
    for r in points:
        loss = (r.get("epochs") or [{}])[-1].get("train_loss")
        if r.get("exit_code") == 0 and loss is not None and loss > math.log(OUT_DIM) - 0.01:
            out.append("%s: its last epoch's loss %.3f is ln %d = %.3f, the uniform output: the teacher had not"
                       " started to learn (its features are about the untrained network's).\n"
                       % (r["point"], loss, OUT_DIM, math.log(OUT_DIM)))
    finished = [r for r in points if r.get("exit_code") == 0 and r.get("evals")]
    if len(finished) == 1:
        out.append("One point has finished, so nothing is compared yet: the `_v2` configs' recipe is DINO's scaled to"
                   " the image, not yet chosen here.\n")
    b = best(points) if len(finished) > 1 else None
    if b:
        r, blocks, knn = b
        out.append("Best point on the validation split: **%s** (%s features), 20-NN %.2f.%s\n" % (
            r["point"], {"blocks1": "last-token", "blocks2": "two-token"}[blocks], knn,
            " " + diag["note"] if diag and diag.get("note") else ""))
