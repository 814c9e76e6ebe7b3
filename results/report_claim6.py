"""The report's claim 6: DINO with SimA against DINO with XCA (XCiT), scored by the frozen features of
each teacher (results/frozen_eval.py: weighted k-NN and a linear probe on the test set), every seed of
the two rows, the study's targets, and SimA − XCA with its interval once both rows have two seeds.

The interval: a frozen-feature evaluation keeps no per-image record, so it is the analytic, unpaired
form of results/verdicts.py (each row's seed variance plus its binomial test-set variance), one family
of two comparisons (20-NN and linear probe, Holm over 2), the paper's XCiT-S12/16 differences beside
them for their direction."""
import statistics

import frozen_eval
import report_claims
import stats
import verdicts

ROWS = (("dino_xcit_xca", "XCA", "75.8 / 71.6"), ("dino_xcit_sima", "SimA", "75.5 / 71.2"))
LINEAR_TARGET = 88.0  # the study's target for a DINO teacher's linear probe on the test set
PAPER = {"20-NN": 71.2 - 71.6, "linear probe": 75.5 - 75.8}  # SimA − XCA, XCiT-S12/16, ImageNet, 100 epochs


BLOCKS_KEY = frozen_eval.BLOCKS_KEY  # the record's two-token evaluation (reproduce.py)
FEATURES = (("eval", "the last class token"), (BLOCKS_KEY, "both class-attention tokens concatenated"))


def finished(t, row, key="eval"):
    """The records of a row whose DINO run finished and whose teacher was scored (by the evaluation
    `key`: "eval", the last class token, or BLOCKS_KEY), in seed order."""
    return [r for r in t.records.get(row, []) if not r.get("exit_code") and (r.get(key) or {}).get("result")]


def mean_cell(vals):
    """One seed's value, or mean ± sample std (n seeds)."""
    if len(vals) == 1:
        return "%.2f" % vals[0]
    return "%.2f ± %.2f (%d seeds)" % (statistics.mean(vals), statistics.stdev(vals), len(vals))


def teacher_cells(recs, key="eval"):
    """(k-NN k=10 / 20 / 100, linear probe) cells over a row's scored seeds."""
    res = [r[key]["result"] for r in recs]
    ks = [[v["top1"] for v in x["knn"]["results"]] for x in res]
    knn = " / ".join(mean_cell([k[i] for k in ks]) for i in range(len(ks[0])))
    return knn, mean_cell([x["linear_probe"]["top1"] for x in res])


def row_line(t, row, what, paper, baselines, pixels):
    """The table line of one DINO row; its first record's baselines (the untrained network, the pixels)
    collected for the lines under it."""
    recs, ok = t.records.get(row, []), finished(t, row)
    knn, lp = teacher_cells(ok) if ok else ("not run", "—")
    failed = "; ".join("seed %s failed: %s" % (r.get("seed"), r.get("error", "")) for r in recs if r.get("exit_code"))
    if failed:
        knn = knn + "; " + failed if ok else failed
    elif recs and len(recs) < t.rows[row][3]:
        knn += " (%d of %d seeds)" % (len(recs), t.rows[row][3])
    b = (recs or [{}])[0].get("baselines", {})
    if "init" in b:
        baselines.append(("%s freshly initialised (no training)" % what, b["init"]))
    if "pixels" in b and not pixels:
        pixels.append(("raw pixels", b["pixels"]))
    line = "| DINO teacher, %s | %s | %s | %s | %s |" % (what, knn, lp, t.walls(row), paper)
    two = finished(t, row, BLOCKS_KEY)
    if not two:
        return [line]
    knn2, lp2 = teacher_cells(two, BLOCKS_KEY)
    if len(two) < len(ok):
        knn2 += " (seed%s %s)" % ("s" if len(two) > 1 else "", ", ".join(str(r.get("seed")) for r in two))
    return [line, "| DINO teacher, %s: %d class-attention tokens | %s | %s | — | — |"
            % (what, frozen_eval.ALL_CLASS_BLOCKS, knn2, lp2)]


def section(t, out):
    """Claim 6: DINO's frozen features, k-NN and linear probe, and the same for what they must beat."""
    out.append("## Claim 6: DINO with SimA against DINO with XCA (XCiT)\n")
    out.append("Each cell: one seed's top-1 (%), or the mean ± sample std over the seeds; DINO's wall and CPU time"
               " (min:s) are the mean of a run.\n")
    out.append("| features | k-NN k=10 / 20 / 100 | linear probe | DINO wall per run (CPU) | paper (XCiT-S12/16, 100 ep.): linear / 20-NN |")
    out.append("|---|---|---|---|---|")
    baselines, pixels = [], []  # the untrained networks, then the raw pixels (the same in every record)
    for row, what, paper in ROWS:
        out.extend(row_line(t, row, "XCiT, " + what, paper, baselines, pixels))
    for what, ev in baselines + pixels:
        cells = frozen_cells(ev)
        out.append("| %s | %s | %s | — | — |" % ((what,) + cells))
    out.append("")
    if any(finished(t, row, BLOCKS_KEY) for row, _, _ in ROWS):
        out.append("A teacher's line with %d class-attention tokens scores the same teacher with the class tokens of its"
                   " last %d blocks concatenated (`sima-eval --feature-blocks %d`; the paper concatenates the last four"
                   " blocks' and this XCiT has %d class-attention blocks), on the seeds whose record has it.\n"
                   % ((frozen_eval.ALL_CLASS_BLOCKS,) * 4))
    for key, what in FEATURES:
        out.extend(target_lines(t, key, what))


def frozen_cells(ev):
    """(k-NN k=10 / 20 / 100, linear probe) cells of one frozen-feature evaluation."""
    res = (ev or {}).get("result")
    if not res:
        return ("eval failed: " + ev.get("error", "") if ev else "not run"), "—"
    return " / ".join("%.2f" % v["top1"] for v in res["knn"]["results"]), "%.2f" % res["linear_probe"]["top1"]


def target_lines(t, key="eval", features="the last class token"):
    """Each scored DINO row against the study's targets (its seeds' mean 20-NN above the raw pixels', from
    its own records; its mean linear probe at LINEAR_TARGET or more), then SimA − XCA; by the teachers'
    features of evaluation `key` (FEATURES)."""
    scores, said, seed_ids = {}, [], set()
    for row, what, _ in ROWS:
        ok = finished(t, row, key)
        if not ok:
            continue
        per_seed = [frozen_eval.scores(r[key]) for r in ok]
        scores[what] = per_seed
        seed_ids.update(r.get("seed") for r in ok)
        knn, lp = statistics.mean(s[0] for s in per_seed), statistics.mean(s[1] for s in per_seed)
        pix = frozen_eval.scores(ok[0].get("baselines", {}).get("pixels"))[0]
        vs = ("the raw pixels' not recorded" if pix is None else
              "%s the raw pixels' %.2f: %s" % (("above", pix, "met") if knn > pix else ("not above", pix, "missed")))
        mean = " (mean of %d seeds)" % len(ok) if len(ok) > 1 else ""
        said.append("%s%s: 20-NN %.2f, %s; linear probe %.2f against %.1f: %s." % (
            what, mean, knn, vs, lp, LINEAR_TARGET, "met" if lp >= LINEAR_TARGET else "missed"))
    if not said:
        return []
    seeds = sorted({len(v) for v in scores.values()})
    one = "seed %s" % seed_ids.pop() if seeds == [1] and len(seed_ids) == 1 else "over the seeds"
    line = ("Targets (test set, %s%s): a DINO teacher's 20-NN above the raw pixels', and its linear probe at %.0f %%"
            " or more. %s" % (one, "" if key == "eval" else "; %s" % features, LINEAR_TARGET, " ".join(said)))
    if len(scores) == 2:
        line += " " + difference_line(scores["SimA"], scores["XCA"])
    return [line, ""]


def difference_line(sima, xca):
    """SimA − XCA at 20-NN and by linear probe: with an interval and a verdict once each row has 2 seeds
    (the analytic form, a family of the two measures), else the bare difference."""
    measures = list(PAPER)
    if min(len(sima), len(xca)) < 2:
        d = [statistics.mean(s[i] for s in sima) - statistics.mean(x[i] for x in xca) for i in range(2)]
        return ("SimA − XCA: 20-NN %s, linear probe %s (%s, so no interval; the paper's −0.4 and −0.3)."
                % (stats.signed(d[0]), stats.signed(d[1]),
                   "one seed each" if max(len(sima), len(xca)) == 1 else "one seed on a side"))
    family = [(verdicts.estimate([[(s[i], None) for s in sima], [(x[i], None) for x in xca]], [1, -1]), PAPER[m])
              for i, m in enumerate(measures)]
    js = verdicts.judge(family)
    parts = ["%s %s: %s%s" % (m, report_claims.fmt_interval(j), j["verdict"], " (%s)" % j["flag"] if j["flag"] else "")
             for m, j in zip(measures, js)]
    return ("SimA − XCA (%d and %d seeds; seeds + test set, analytic (unpaired); Holm over the two measures): %s;"
            " the paper's %s and %s." % (len(sima), len(xca), "; ".join(parts),
                                         stats.signed(PAPER["20-NN"]), stats.signed(PAPER["linear probe"])))
