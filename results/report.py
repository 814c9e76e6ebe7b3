"""docs/RESULTS.md from the run records in results/runs/ (see reproduce.py). Every number in the
tables comes from a record; every record names the command that produced it. The text that
interprets the numbers is results/discussion.md, copied in as written."""
import json
import os
import statistics

import report_dino
import report_protocol
import report_speed
import stats
import fixed
import frozen_eval
import tta

# The paper's figures, ImageNet top-1 unless said (SimA paper, Koohpayegani & Pirsiavash,
# arXiv:2206.08898): Table 1 for each model and its SimA twin, and for the single-head and
# ReLU-MLP DeiT-S rows; Table 5 for DINO (linear / 20-NN). docs/models.md names the models' sources.
PAPER = {
    "deit": ("DeiT-S", "softmax", 79.8, 79.8),
    "xcit": ("XCiT-S12/16", "XCA", 82.0, 82.1),
    "cvt": ("CvT-13", "softmax", 81.6, 81.4),
}

# Claim 5's rows: every attention of the comparison (docs/attention.md names each one's source).
E = fixed.PREFIX  # claims 2 to 5 read the fixed-budget rows (results/fixed.py)
CLAIM5 = (("deit_softmax", "softmax"), ("deit_sima", "SimA (ℓ1)"), ("deit_relu_attn", "ReLU, L⁻¹"),
          ("deit_soft", "SOFT"), ("deit_linear_elu", "linear, ELU+1"), ("deit_cosformer", "CosFormer, no re-weighting"),
          ("deit_cosformer_cos1d", "CosFormer, cos re-weighting"), ("deit_performer", "Performer (FAVOR+)"),
          ("deit_nystromformer", "Nyströmformer"), ("deit_efficient", "Efficient Attention"),
          ("deit_linformer", "Linformer"))

MAP_LABELS = {"q": "q̂", "k": "k̂", "cls": "cls row"}
FMNIST_CLASSES = ["T-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                  "ankle boot"]


def fmt_mean(vals):
    if not vals:
        return "—"
    if len(vals) == 1:
        return "%.2f" % vals[0]
    return "%.2f ± %.2f" % (statistics.mean(vals), statistics.stdev(vals))


def fmt_time(secs):
    return "%d:%02d" % (secs // 60, secs % 60)


class Table:
    def __init__(self, root, rows, load):
        self.rows = {r[0]: r for r in rows}
        self.load = load
        self.records = {}
        for row, _, _, seeds in rows:
            self.records[row] = [rec for rec in (load(row, s) for s in range(seeds)) if rec is not None]

    def top1(self, row):
        return [r["top1"] for r in self.records[row] if "top1" in r]

    def partial(self, row):
        """True while the row has seeds still to run."""
        return len(self.records[row]) < self.rows[row][3]

    def cell(self, row):
        recs = self.records[row]
        want = self.rows[row][3]
        if not recs:
            return "not run"
        failed = [r for r in recs if r.get("exit_code")]
        outcomes = ", ".join("seed %s %s" % (r.get("seed", "?"), "diverged" if r.get("diverged") else "failed")
                             for r in failed)
        if failed and not self.top1(row):
            return "%s (%d of %d seeds): %s" % (outcomes, len(recs), want, failed[0].get("error", ""))
        s = fmt_mean(self.top1(row))
        if failed:  # the mean is of the seeds that finished; the others are named, not dropped
            s += " (%d of %d seeds finished; %s)" % (len(self.top1(row)), want, outcomes)
        elif self.partial(row):
            s += " (%d of %d seeds)" % (len(recs), want)
        return s

    def walls(self, row):
        """Mean wall time of a run, and its CPU time (user + system), which a busy machine changes less."""
        w = [r["wall_s"] for r in self.records[row]]
        c = [r.get("cpu_s", 0) for r in self.records[row]]
        return "%s (CPU %s)" % (fmt_time(statistics.mean(w)), fmt_time(statistics.mean(c))) if w else "—"

    def cpu_ratio(self, row, base):
        a = [r.get("cpu_s", 0) for r in self.records[row]]
        b = [r.get("cpu_s", 0) for r in self.records[base]]
        return "%.2f" % (statistics.mean(a) / statistics.mean(b)) if a and b and statistics.mean(b) > 0 else "—"

    def welch(self, row, base):
        a, b = self.top1(row), self.top1(base)
        return stats.welch(a, b) if a and b else None

    def delta(self, row, base):
        """row minus base with its 95 % Welch interval, or — when either has no result."""
        w = self.welch(row, base)
        return stats.fmt_welch(w) if w else "—"

    def verdict(self, row, base, paper):
        return self.verdict_of(self.welch(row, base), (row, base), paper)

    def verdict_of(self, w, rows, paper):
        """stats.verdict on the interval w drawn from `rows`, marked "so far" while any of them has seeds
        still to run (it can change)."""
        if not w:
            return "—"
        return stats.verdict(w, paper) + (", so far" if any(self.partial(r) for r in rows) else "")

    def interaction(self, row, base, row2, base2, paper):
        """(row - base) - (row2 - base2), how much more a change moves one model than another, with its
        Welch-Satterthwaite interval over the four rows' seeds: the Δ and verdict cells."""
        terms = ((row, 1), (base, -1), (row2, -1), (base2, 1))
        groups = [self.top1(r) for r, _ in terms]
        w = stats.contrast(groups, [k for _, k in terms]) if all(groups) else None
        return (stats.fmt_welch(w) if w else "—"), self.verdict_of(w, [r for r, _ in terms], paper)


def divergence_verdict(t, row):
    """Claim 4's "none" against the paper, which reports that it diverges: which seeds did (a record with
    `diverged`), or that every seed trained; "so far" while seeds are still to run."""
    recs = t.records[row]
    if not recs:
        return "—"
    so_far = ", so far" if t.partial(row) else ""
    bad = [str(r.get("seed", "?")) for r in recs if r.get("diverged")]
    if bad:
        return "as the paper: seed%s %s diverged (%d of %d)%s" % (
            "s" * (len(bad) > 1), ", ".join(bad), len(bad), len(recs), so_far)
    trained = sum(1 for r in recs if "top1" in r)
    return "differs from the paper: %d of %d seed%s trained, none diverged%s" % (
        trained, len(recs), "s" * (len(recs) != 1), so_far)


def commands(t, out):
    out.append("## Every run\n")
    out.append("Each line is one record in `results/runs/<row>/s<seed>.json`: the command (run from the"
               " repository root), its wall time and outcome, and the commit and load average it ran at.\n")
    out.append("| row | seed | outcome | wall | CPU | commit | load | command |")
    out.append("|---|---|---|---|---|---|---|---|")
    for row in t.rows:
        for r in t.records[row]:
            outcome = ("%.2f" % r["top1"]) if "top1" in r else (r.get("error") or "done")
            out.append("| %s | %d | %s | %s | %s | %s | %.1f | `%s` |" % (
                row, r["seed"], outcome.replace("|", "/"), fmt_time(r["wall_s"]), fmt_time(r.get("cpu_s", 0)), r["commit"],
                r.get("load_before", 0), r["command"]))
    out.append("")


def seed0(t, row):
    """A row's seed-0 record, if the table has the row and the record."""
    return next((r for r in t.records.get(row, []) if r.get("seed") == 0), None)


def drawn_from_final(h, rec):
    """Whether a heatmap record was drawn from seed 0's finished run `rec`: it names a run trained at
    the record's date."""
    tr = h.get("trained")
    return bool(tr and rec and tr.get("date") == rec.get("date") and rec.get("exit_code") == 0)


def heatmap_source(h, rec):
    """Which checkpoint a heatmap record was drawn from: seed 0's finished run when the record names
    that run (reproduce.py heatmaps stores it), else an earlier one (a checkpoint the row's path held
    before its final run, such as a 5-epoch run from before the protocol)."""
    tr = h.get("trained")
    if drawn_from_final(h, rec):
        what = ["%d epoch%s" % (tr["epochs"], "s" * (tr["epochs"] != 1))] if tr.get("epochs") else []
        what += ["test top-1 %.2f" % tr["top1"]] if tr.get("top1") is not None else []
        return "seed 0's final run" + (" (%s)" % ", ".join(what) if what else "")
    why = ("which is not recorded yet" if not rec else "which was recorded after they were drawn" if tr else
           "which they do not name (drawn before heatmap records named their run)")
    return ("an earlier checkpoint, not seed 0's final run, %s; `reproduce.py heatmaps --rows %s` redraws"
            " them from that run" % (why, h["row"]))


def heatmap_tally(t, done):
    """For each drawn row: whether its panels come from seed 0's final run, and how many of its maps put
    more of their mass on the object than a flat map would (foreground_mass > foreground_share)."""
    rows = []
    for row, h in done:
        final = drawn_from_final(h, seed0(t, row))
        marks = [m["foreground_mass"] > im["foreground_share"] for im in h["result"]["images"]
                 for m in im["maps"].values()]
        rows.append((row, final, sum(marks), len(marks)))
    return rows


def heatmap_tally_lines(tally):
    """The tally as a sentence: every row's count, then the sums over final-run rows and over all."""
    def total(rows):
        return "%d of %d" % (sum(r[2] for r in rows), sum(r[3] for r in rows))
    final = [r for r in tally if r[1]]
    return ["Maps with more of their mass on the object than a flat map (*on object* > *object*): %s. Over the"
            " rows drawn from seed 0's final run (%d of %d rows): %s; over every panel above: %s.\n" % (
                "; ".join("%s %d of %d%s" % (r[0], r[2], r[3], "" if r[1] else " (earlier checkpoint)") for r in tally),
                len(final), len(tally), total(final), total(tally))]


def heatmap_section(t, heatmaps, out):
    """The panels of reproduce.py heatmaps, with how much of each map lies on the object and the
    checkpoint they were drawn from."""
    out.append("## Saliency maps (the paper's Figure 3)\n")
    done = [(row, h) for row, h in heatmaps if h]
    if not done:
        out.append("not run\n")
        return
    out.append("Each panel: the test image, then the last attention layer's map(s) blended over it: the ℓ2 norm"
               " of q̂ and of k̂ per token for SimA and XCA models, the class token's attention row for softmax"
               " models, each min-max scaled to [0, 1]. *On object* is the share of a map's mass on the pixels"
               " brighter than the threshold (the garment); *object* is those pixels' share of the image, which"
               " a flat map would match.\n")
    for row, h in done:
        r = h["result"]
        out.append("**%s**, from %s. Layer %d of %d, drawn %s at commit %s: `%s`\n" % (
            row, heatmap_source(h, seed0(t, row)), r["images"][0]["layer"] + 1, r["images"][0]["layer_count"],
            h.get("date", "?"), h.get("commit", "?"), h["command"]))
        maps = [m for m in ("q", "k", "cls") if m in r["images"][0]["maps"]]
        out.append("| image | predicted | object | %s | panel |" % " | ".join(MAP_LABELS[m] + " on object" for m in maps))
        out.append("|---|---|---|%s---|" % ("---|" * len(maps)))
        for im in r["images"]:
            out.append("| %s | %s | %.2f | %s | ![%s](%s) |" % (
                im["name"], FMNIST_CLASSES[im["predicted"]] if "predicted" in im else "—", im.get("foreground_share", float("nan")),
                " | ".join("%.2f" % im["maps"][m].get("foreground_mass", float("nan")) for m in maps), im["name"],
                os.path.relpath(im["files"][0], "docs")))
        out.append("")
    out += heatmap_tally_lines(heatmap_tally(t, done))


def tta_section(t, out):
    """Time to accuracy per DeiT attention (results/tta.py): epochs from claim 5's runs, seconds per
    epoch from timing runs alone at two threads (tta.ROUNDS rounds of each)."""
    out.append("### Time to accuracy (DeiT, validation split, %d threads)\n" % tta.THREADS)
    out.append("For each attention: the first epoch whose validation top-1 reaches each target in claim 5's %d-epoch runs"
               " (mean ± std over the seeds that reached it, and how many did), times the seconds per epoch of a"
               " %d-epoch run of the same config alone on the machine at %d threads, repeated in %d rounds that"
               " alternate the attentions (the median of every round's epochs after its first, and in brackets the"
               " least and most of those epochs; evaluations not included); images/s from that median. A run at"
               " two threads does not repeat a one-thread run bit for bit, so the epochs are the recipe's, measured"
               " at one thread (results/tta.py).\n"
               % (fixed.EPOCHS, tta.TIMING_EPOCHS, tta.THREADS, tta.ROUNDS))
    out.append("| attention (DeiT) | s per epoch | images/s | to %.0f %%: epoch, time | to %.0f %%: epoch, time |" % tta.TARGETS)
    out.append("|---|---|---|---|---|")
    for row, what in CLAIM5:
        s = tta.summary(t.records.get(E + row, []), t.records.get(tta.PREFIX + row, []))
        cells = ["not run", "not run"] if s["targets"] is None else []
        for x in tta.TARGETS if s["targets"] is not None else ():
            hit, of, mean, sd, secs = s["targets"][x]
            if not hit:
                cells.append("not reached (0 of %d)" % of)
                continue
            ep = "%.1f" % mean + (" ± %.1f" % sd if sd is not None else "")
            cells.append("%s%s, %s" % (ep, "" if hit == of else " (%d of %d seeds)" % (hit, of),
                                       fmt_time(secs) if secs is not None else "not timed"))
        spe = "%.1f s" % s["s_per_epoch"] if s["s_per_epoch"] else "not timed"
        if s["s_range"]:
            spe += " (%.1f–%.1f%s)" % (s["s_range"] + ("" if s["rounds"] == tta.ROUNDS else
                                                        ", %d of %d rounds" % (s["rounds"], tta.ROUNDS),))
        ips = "%.0f" % s["img_per_s"] if s["img_per_s"] else "—"
        out.append("| %s | %s | %s | %s | %s |" % (what, spe, ips, cells[0], cells[1]))
    out.append("")
    out += tta_hosts_lines(t)


def tta_hosts_lines(t):
    """Where and when the timing runs of the table above ran: seconds per epoch differ between hosts."""
    hosts = {}
    for row, _ in CLAIM5:
        for rec in t.records.get(tta.PREFIX + row, []):
            hosts.setdefault(rec.get("cpu", "unknown CPU"), []).append(rec.get("date", "")[:10])
    if not hosts:
        return []
    parts = ["%d on %s (%s)" % (len(d), cpu, ", ".join(sorted(set(d)))) for cpu, d in sorted(hosts.items())]
    return ["Timing runs: " + "; ".join(parts) + ". The epochs come from the 50-epoch runs, on whichever host"
            " each sitting ran (their records list each sitting's CPU).\n"]


def claim1_section(t, out):
    """Claim 1 (final runs at the budget cap) and its PyTorch twin."""
    out.append("## Claim 1: SimA matches the attention it replaces\n")
    out.append("Top-1 (%) on the Fashion-MNIST test set after the last epoch, mean ± sample std over seeds."
               " Δ is SimA minus the baseline with its 95 % Welch interval; the verdict compares the paper's Δ"
               " with that interval.\n")
    out.append("| model | baseline | baseline top-1 | SimA top-1 | Δ [95 % CI] | paper (ImageNet): baseline → SimA | verdict | wall per run |")
    out.append("|---|---|---|---|---|---|---|---|")
    for fam, base, sima in (("deit", "deit_softmax", "deit_sima"), ("xcit", "xcit_xca", "xcit_sima"),
                            ("cvt", "cvt_softmax", "cvt_sima")):
        name, battn, p0, p1 = PAPER[fam]
        out.append("| %s | %s | %s | %s | %s | %s %.1f → %.1f (%s) | %s | %s / %s |" % (
            fam, battn, t.cell(base), t.cell(sima), t.delta(sima, base), name, p0, p1, stats.signed(p1 - p0, 1),
            t.verdict(sima, base, round(p1 - p0, 1)), t.walls(base), t.walls(sima)))
    out.append("")

    out.append("### The framework at convergence: the same CvT SimA trained by PyTorch\n")
    out.append("`results/torch_twin.py` trains `configs/paper/cvt_sima.json` with Debian's PyTorch: the same model,"
               " initial-weight distributions, batches, crops, optimizer and schedule (its header lists what differs)."
               " Agreement means the difference lies inside its 95 % interval; time is per run at one thread.\n")
    out.append("| trained by | top-1 | Δ PyTorch − sima.cpp [95 % CI] | wall per run | CPU ratio (PyTorch / sima.cpp) |")
    out.append("|---|---|---|---|---|")
    out.append("| sima.cpp | %s | | %s | |" % (t.cell("cvt_sima"), t.walls("cvt_sima")))
    out.append("| PyTorch | %s | %s | %s | %s |" % (t.cell("torch_twin_cvt_sima"), t.delta("torch_twin_cvt_sima", "cvt_sima"),
                                                  t.walls("torch_twin_cvt_sima"), t.cpu_ratio("torch_twin_cvt_sima", "cvt_sima")))
    out.append("")


def claims_2_to_5_section(t, out, runs):
    """Claims 2 to 5 at the fixed budget (results/fixed.py), with time to accuracy."""
    out.append("## Claims 2 to 5: at a fixed budget of %d epochs\n" % fixed.EPOCHS)
    out.append("These rows train %d epochs on the validation split's 50 000 training images (results/fixed.py), each"
               " compared with its own controls at the same budget; the test set is evaluated once, on the last"
               " weights. A difference here is a difference at this budget, short of convergence (the DeiT sweep"
               " gained %s points from 50 to 100 epochs): see the protocol.\n"
               % (fixed.EPOCHS, report_protocol.sweep_gain(runs, "deit_sima", 100)))
    out.append("## Claim 2: one head\n")
    out.append("| attention | 4 heads | 1 head | Δ [95 % CI] | paper (DeiT-S, 6 → 1 head) | verdict |")
    out.append("|---|---|---|---|---|---|")
    out.append("| softmax | %s | %s | %s | 79.8 → 77.0 (−2.8) | %s |" % (
        t.cell(E + "deit_softmax"), t.cell(E + "deit_softmax_1head"), t.delta(E + "deit_softmax_1head", E + "deit_softmax"),
        t.verdict(E + "deit_softmax_1head", E + "deit_softmax", -2.8)))
    out.append("| SimA | %s | %s | %s | 79.8 → 79.4 (−0.4) | %s |" % (
        t.cell(E + "deit_sima"), t.cell(E + "deit_sima_1head"), t.delta(E + "deit_sima_1head", E + "deit_sima"),
        t.verdict(E + "deit_sima_1head", E + "deit_sima", -0.4)))
    out.append("| the claim: SimA's Δ − softmax's Δ | | | %s | +2.4 (−0.4 − (−2.8)) | %s |" % t.interaction(
        E + "deit_sima_1head", E + "deit_sima", E + "deit_softmax_1head", E + "deit_softmax", 2.4))
    out.append("")
    out.append("The last row is what the paper claims, that one head costs softmax more than SimA: the difference"
               " of the two Δ, with its Welch–Satterthwaite interval over the four rows' seeds (results/stats.py,"
               " `contrast`).\n")

    out.append("## Claim 3: ReLU instead of GELU in the MLP\n")
    out.append("| model | GELU | ReLU | Δ [95 % CI] | paper (DeiT-S SimA) | verdict |")
    out.append("|---|---|---|---|---|---|")
    out.append("| DeiT SimA | %s | %s | %s | 79.8 → 79.6 (−0.2) | %s |" % (
        t.cell(E + "deit_sima"), t.cell(E + "deit_sima_relu_mlp"), t.delta(E + "deit_sima_relu_mlp", E + "deit_sima"),
        t.verdict(E + "deit_sima_relu_mlp", E + "deit_sima", -0.2)))
    out.append("| DeiT softmax (control) | %s | %s | %s | not reported | %s |" % (
        t.cell(E + "deit_softmax"), t.cell(E + "deit_softmax_relu_mlp"), t.delta(E + "deit_softmax_relu_mlp", E + "deit_softmax"),
        t.verdict(E + "deit_softmax_relu_mlp", E + "deit_softmax", None)))
    out.append("| SimA's Δ − softmax's Δ | | | %s | not reported | %s |" % t.interaction(
        E + "deit_sima_relu_mlp", E + "deit_sima", E + "deit_softmax_relu_mlp", E + "deit_softmax", None))
    out.append("")
    out.append("The last row asks whether a ReLU MLP does anything for SimA that it does not do for softmax: the"
               " difference of the two Δ, with its Welch–Satterthwaite interval over the four rows' seeds.\n")

    out.append("## Claim 4: how Q and K are normalised (XCiT, as the paper)\n")
    out.append("| normalisation | top-1 or outcome | Δ to ℓ1 [95 % CI] | paper (XCiT-S12/16 → SimA, ImageNet) | verdict |")
    out.append("|---|---|---|---|---|")
    l1, l2, none = E + "xcit_sima", E + "xcit_sima_l2", E + "xcit_sima_nonorm"
    out.append("| ℓ1 (SimA) | %s | | trains (82.1) | |" % t.cell(l1))
    out.append("| ℓ2 | %s | %s | −2.9 | %s |" % (t.cell(l2), t.delta(l2, l1), t.verdict(l2, l1, -2.9)))
    out.append("| none | %s | %s | diverges (NaN loss) | %s |" % (t.cell(none), t.delta(none, l1), divergence_verdict(t, none)))
    out.append("")

    out.append("## Claim 5: the other softmax-free variants, same budget\n")
    out.append("| attention (DeiT) | top-1 | Δ to SimA [95 % CI] | wall per run |")
    out.append("|---|---|---|---|")
    for row, what in CLAIM5:
        d = "" if row == "deit_sima" else t.delta(E + row, E + "deit_sima")
        out.append("| %s | %s | %s | %s |" % (what, t.cell(E + row), d, t.walls(E + row)))
    out.append("")
    tta_section(t, out)


def frozen_cells(ev):
    """(k-NN k=10 / 20 / 100, linear probe) cells of a frozen-feature evaluation (results/frozen_eval.py)."""
    res = (ev or {}).get("result")
    if not res:
        return ("eval failed: " + ev.get("error", "") if ev else "not run"), "—"
    return " / ".join("%.2f" % v["top1"] for v in res["knn"]["results"]), "%.2f" % res["linear_probe"]["top1"]


def claim6_section(t, out):
    """Claim 6: DINO's frozen features, k-NN and linear probe, and the same for what they must beat."""
    out.append("## Claim 6: DINO with SimA against DINO with XCA (XCiT)\n")
    out.append("| features | k-NN k=10 / 20 / 100 | linear probe | DINO CPU / wall (min:s) | paper (XCiT-S12/16, 100 ep.): linear / 20-NN |")
    out.append("|---|---|---|---|---|")
    baselines, pixels = [], []  # the untrained networks, then the raw pixels (the same in every record)
    for row, what, paper in (("dino_xcit_xca", "XCiT, XCA", "75.8 / 71.6"), ("dino_xcit_sima", "XCiT, SimA", "75.5 / 71.2")):
        recs = t.records[row]
        knn, lp, wall = "not run", "—", "—"
        if recs:
            r = recs[0]
            wall = "%s / %s" % (fmt_time(r.get("cpu_s", 0)), fmt_time(r["wall_s"]))
            knn, lp = frozen_cells(r.get("eval")) if "eval" in r else (knn, lp)
            if r.get("exit_code"):
                knn = "failed: " + r.get("error", "")
            b = r.get("baselines", {})
            if "init" in b:
                baselines.append(("%s freshly initialised (no training)" % what, b["init"]))
            if "pixels" in b and not pixels:
                pixels.append(("raw pixels", b["pixels"]))
        out.append("| DINO teacher, %s | %s | %s | %s | %s |" % (what, knn, lp, wall, paper))
    for what, ev in baselines + pixels:
        out.append("| %s | %s | %s | — | — |" % ((what,) + frozen_cells(ev)))
    out.append("")
    out.extend(dino_target_lines(t))


DINO_ROWS = (("dino_xcit_xca", "XCA"), ("dino_xcit_sima", "SimA"))
LINEAR_TARGET = 88.0  # the study's target for a DINO teacher's linear probe on the test set


def dino_target_lines(t):
    """Claim 6 against the study's targets, for each DINO row that finished: its teacher's 20-NN above the
    raw pixels' 20-NN (from the same record), its linear probe at LINEAR_TARGET or more; then SimA − XCA,
    one seed each, so a difference without an interval, beside the paper's."""
    scores, said = {}, []
    for row, what in DINO_ROWS:
        r = (t.records[row] or [None])[0]
        if not r or r.get("exit_code") or not (r.get("eval") or {}).get("result"):
            continue
        knn, lp = scores[what] = frozen_eval.scores(r["eval"])
        pix = frozen_eval.scores(r.get("baselines", {}).get("pixels"))[0]
        vs = ("the raw pixels' not recorded" if pix is None else
              "%s the raw pixels' %.2f: %s" % (("above", pix, "met") if knn > pix else ("not above", pix, "missed")))
        said.append("%s: 20-NN %.2f, %s; linear probe %.2f against %.1f: %s." % (
            what, knn, vs, lp, LINEAR_TARGET, "met" if lp >= LINEAR_TARGET else "missed"))
    if not said:
        return []
    line = ("Targets (test set, seed 0): a DINO teacher's 20-NN above the raw pixels', and its linear probe at"
            " %.0f %% or more. %s" % (LINEAR_TARGET, " ".join(said)))
    if len(scores) == 2:
        line += (" SimA − XCA: 20-NN %s, linear probe %s (one seed each, so no interval; the paper's −0.4 and"
                 " −0.3)." % tuple(stats.signed(s - x) for s, x in zip(scores["SimA"], scores["XCA"])))
    return [line, ""]


def budget_section(t, out, runs):
    """The header: CPU spent so far, the projection of the rest, and what the whole table takes."""
    total = sum(r["wall_s"] for row in t.rows for r in t.records[row])
    cpu = sum(r.get("cpu_s", 0) for row in t.rows for r in t.records[row])
    n = sum(len(t.records[row]) for row in t.rows)
    sweeps = report_protocol.sweep_records(runs)
    scpu = sum(r.get("cpu_s", 0) for r in sweeps)
    out.append("Budget so far: %.1f CPU-hours (%d sweep runs %.1f, %d final runs and speed rows %.1f), against the"
               " study's limit of 40 CPU-hours on this 2-core machine.\n" % ((cpu + scpu) / 3600, len(sweeps),
                                                                         scpu / 3600, n, cpu / 3600))
    pcpu, counted, left = report_protocol.projected_cpu(runs, t.rows)
    if counted:
        out.append("Projected CPU of the training, DINO and time-to-accuracy rows (%d rows, every seed; the sweeps' CPU"
                   " per epoch times each row's planned epochs: its sweep's choice or the budget cap for claim 1 and"
                   " DINO, the fixed budget for claims 2 to 5; see the protocol): %.1f CPU-hours%s. Not projected: %s.\n"
                   % (len(counted), pcpu / 3600, ", over the 40 this study allows" if pcpu > 40 * 3600 else "",
                      ", ".join(left)))
    out.append("%d runs recorded: %.1f hours of wall time and %.1f CPU-hours in all (training runs went one or two at a"
               " time, one thread each, and each record keeps the load average when it started; the speed rows"
               " alone at two threads).\n" % (n, total / 3600, cpu / 3600))
    # The night's length: `run --jobs 2` keeps two single-threaded runs going on the two cores, then times
    # the speed rows alone. An estimate from the recorded times, not a measured whole run.
    single = sum(r["wall_s"] + r.get("eval", {}).get("wall_s", 0)
                 for row in t.rows if t.rows[row][2] not in ("bench", "tta") for r in t.records[row])
    bench = sum(r["wall_s"] for row in t.rows if t.rows[row][2] in ("bench", "tta") for r in t.records[row])
    missing = sum(t.rows[row][3] - len(t.records[row]) for row in t.rows)
    if missing:  # the recorded times are a part: the projection says more about the whole
        out.append("After `./setup.sh`, the whole table from scratch (`python3 results/reproduce.py sweep`, then `run --jobs 2`,"
                   " `heatmaps` and `report`) cannot yet be timed from the records: %d of its runs are still to make."
                   " The projection above, run two at a time, is about %.0f hours of wall time on a 2-core machine,"
                   " before the sweeps, the PyTorch twin and the speed rows.\n" % (missing, pcpu / 2 / 3600))
    else:
        out.append("After `./setup.sh`, the whole table from scratch (`python3 results/reproduce.py run --jobs 2`, then"
                   " `heatmaps` and `report`) takes about %.1f hours on a 2-core machine: the %.1f hours of"
                   " single-threaded training and DINO evaluation two at a time, then %d min of speed and"
                   " time-to-accuracy rows alone"
                   " (an estimate from the recorded times; the runs were made over several sittings, on 2-core hosts"
                   " whose speed differed between sittings, as the discussion says).\n"
                   % ((single / 2 + bench) / 3600, single / 3600, round(bench / 60)))
    return n


def write(root, rows, load, path="", heatmaps=(), runs=""):
    t = Table(root, rows, load)
    out = ["# SimA's claims at Fashion-MNIST scale\n",
           "Generated by `python3 results/reproduce.py report` from the records in `results/runs/`;"
           " `python3 results/reproduce.py run` makes the missing ones (see the script's header)."
           " Do not edit by hand: the discussion comes from `results/discussion.md`.\n"]
    runs = runs or os.path.join(root, "results", "runs")
    n = budget_section(t, out, runs)

    report_protocol.protocol_section(out)
    report_protocol.sweep_section(runs, out)
    report_protocol.widths_section(runs, out)

    claim1_section(t, out)
    claims_2_to_5_section(t, out, runs)
    claim6_section(t, out)
    report_dino.dino_recipe_section(runs, out)

    report_speed.speed_section(t.records, out)

    out.append("## Training curves (seed 0)\n")
    for row in t.rows:
        png = os.path.join(root, "docs", "results", row + ".png")
        if os.path.exists(png) and t.records[row]:  # a curve drawn by a run the tables read
            out.append("**%s** (`configs/paper/%s.json`)\n\n![%s](results/%s.png)\n" % (row, fixed.base_row(row), row, row))

    heatmap_section(t, heatmaps, out)

    disc = os.path.join(root, "results", "discussion.md")
    if os.path.exists(disc):
        with open(disc) as f:
            out.append(f.read().rstrip() + "\n")
    commands(t, out)
    report_protocol.pre_protocol_section(runs, out)
    out.append("\n## What to read next\n")
    out.append("The discussion above interprets every table; how the runs were made is in"
               " [training.md](training.md), and [README.md](README.md) gives the reading order of all the pages.\n")
    path = path or os.path.join(root, "docs", "RESULTS.md")
    write_atomic(path, out)
    speed = os.path.join(os.path.dirname(path), report_speed.SPEED_PAGE)
    os.makedirs(os.path.dirname(speed), exist_ok=True)
    write_atomic(speed, report_speed.speed_page(t.records))
    print("wrote %s (%d runs) and %s" % (os.path.relpath(path, root), n, os.path.relpath(speed, root)))


def write_atomic(path, lines):
    """The page at path, whole or not at all (a temporary file renamed over it)."""
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)
