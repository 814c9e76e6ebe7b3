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


def uniform_note(r):
    """A sentence when a finished point's last epoch ended at the uniform output (loss ln OUT_DIM), else ""."""
    losses = [e.get("train_loss") for e in r.get("epochs") or [] if e.get("train_loss") is not None]
    uniform = math.log(OUT_DIM)
    if r.get("exit_code") != 0 or not losses or losses[-1] <= uniform - 0.01:
        return ""
    if min(losses) < uniform - 0.01:
        first = losses.index(min(losses)) + 1
        return ("%s: its loss fell to %.3f in epoch %d, then rose back to %.3f = ln %d, the uniform output: the"
                " teacher collapsed to a uniform distribution (its features are about the untrained network's)."
                % (r["point"], min(losses), first, losses[-1], OUT_DIM))
    return ("%s: its last epoch's loss %.3f is ln %d = %.3f, the uniform output: the teacher had not started to"
            " learn (its features are about the untrained network's)." % (r["point"], losses[-1], OUT_DIM, uniform))


def same_budget(points, finished):
    """The `points` at the epochs × images most `finished` points ran (ties: the larger), so a choice compares
    like with like."""
    keys = [(r.get("epochs_planned") or 0, r.get("train_subset") or 0) for r in finished]
    if not keys:
        return []
    key = max(set(keys), key=lambda k: (keys.count(k), k))
    return [r for r in points if (r.get("epochs_planned") or 0, r.get("train_subset") or 0) == key]


def spread(points):
    """The range of the best 20-NN (either feature choice) over `points`."""
    top = [max(v for v in (frozen_eval.scores(r["evals"].get(b))[0] for b in ("blocks1", "blocks2")) if v is not None)
           for r in points]
    return max(top) - min(top) if top else 0.0


def best(points):
    """(record, blocks key, 20-NN) of the best finished point and feature choice, or None."""
    scored = [(frozen_eval.scores(r["evals"][b])[0], r, b) for r in points if r.get("exit_code") == 0
              for b in ("blocks1", "blocks2") if r.get("evals", {}).get(b)]
    scored = [s for s in scored if s[0] is not None]
    if not scored:
        return None
    knn, r, b = max(scored, key=lambda s: s[0])
    return r, b, knn


def entropy_cell(rec):
    """The last epoch's teacher entropy per image / over the batch, or "—" for a record without them."""
    last = (rec.get("epochs") or [{}])[-1]
    if last.get("teacher_entropy") is None:
        return "—"
    batch = last.get("teacher_batch_entropy")
    return "%.2f / %s" % (last["teacher_entropy"], "%.2f" % batch if batch is not None else "—")


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
    out.append("*Teacher entropy*: the last epoch's mean entropy of the teacher's output per image / of its mean"
               " over the batch (nats; ln(out_dim), %.2f at %d outputs, is the uniform output, where DINO collapses;"
               " a low first and a high second is a sharp teacher that still spreads the images over many outputs),"
               " where the record kept them.\n" % (math.log(OUT_DIM), OUT_DIM))
    out.append("| point | changes | epochs × images | CPU (min) | teacher entropy | last token | 2 class-attention tokens |")
    out.append("|---|---|---|---|---|---|---|")
    for r in points:
        if r.get("exit_code"):
            out.append("| %s | %s | %d × %d | — | — | failed: %s | — |" % (r["point"], changes(r), r["epochs_planned"],
                                                                           r["train_subset"], r.get("error", "")))
            continue
        out.append("| %s | %s | %d × %d | %.0f | %s | %s | %s |" % (
            (r["point"], changes(r), r["epochs_planned"], r["train_subset"], r["cpu_s"] / 60.0, entropy_cell(r))
            + tuple(cells(r.get("evals")))))
    if diag:
        out.append("| supervised XCiT SimA (diagnostic) | %s | %s | — | — | %s | %s |" % (
            (diag.get("what", ""), diag.get("trained", "")) + tuple(cells(diag.get("evals")))))
        pix = frozen_eval.scores((diag.get("baselines") or {}).get("pixels"))
        if pix[0] is not None:
            out.append("| raw pixels | standardised | — | — | — | %.2f / %.2f | — |" % pix)
    out.append("")
    for r in points:
        note = uniform_note(r)
        if note:
            out.append(note + "\n")
    finished = [r for r in points if r.get("exit_code") == 0 and r.get("evals")]
    learned = [r for r in finished if not uniform_note(r)]
    if len(finished) == 1:
        out.append("One point has finished, so nothing is compared yet: the `_v2` configs' recipe is DINO's scaled to"
                   " the image, not yet chosen here.\n")
    elif finished and not learned:
        out.append("No finished point has learned (each ended at the uniform output), so none is chosen yet.\n")
    learned = same_budget(learned, finished)
    b = best(learned) if learned and len(finished) > 1 else None
    if b:
        r, blocks, knn = b
        out.append("Best point on the validation split: **%s** (%s features), 20-NN %.2f.%s\n" % (
            r["point"], {"blocks1": "last-token", "blocks2": "two-token"}[blocks], knn,
            " " + diag["note"] if diag and diag.get("note") else ""))
        pix = frozen_eval.scores(((diag or {}).get("baselines") or {}).get("pixels"))[0]
        if pix is not None and knn <= pix:
            out.append("No point beats the raw pixels' 20-NN (%.2f) at %d epochs × %d images: every point's features"
                       " are within %.2f points of each other, so at this length the sweep tells a collapse from a run"
                       " that learns, not which recipe learns better features; longer points are needed to choose.\n"
                       % (pix, r.get("epochs_planned", 0), r.get("train_subset", 0), spread(learned)))
