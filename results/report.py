"""docs/RESULTS.md from the run records in results/runs/ (see reproduce.py). Every number in the
tables comes from a record; every record names the command that produced it. The text that
interprets the numbers is results/discussion.md, copied in as written."""
import json
import os
import statistics

import report_budget
import report_claim6
import report_claims
import report_dino
import report_precision
import report_protocol
import report_speed
import stats
import fixed
import practitioner
import precision_rows
import quickstart_precision
import tta

# Claim 5's rows: every attention of the comparison (docs/attention.md names each one's source).
E = fixed.PREFIX  # claims 2 to 5 read the fixed-budget rows (results/fixed.py)
CLAIM5 = report_claims.CLAIM5

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


def commands(t, out):
    out.append("## Every run\n")
    out.append("Each line is one record in `results/runs/<row>/s<seed>.json`: the command (run from the"
               " repository root), the training precision (the record's own, else its command's"
               " `--set train.precision`, else the configs' fp32), its wall time and outcome, and the commit and"
               " load average it ran at.\n")
    out.append("| row | seed | precision | outcome | wall | CPU | commit | load | command |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for row in t.rows:
        for r in t.records[row]:
            outcome = ("%.2f" % r["top1"]) if "top1" in r else (r.get("error") or "done")
            out.append("| %s | %d | %s | %s | %s | %s | %s | %.1f | `%s` |" % (
                row, r["seed"], run_precision(t, row, r), outcome.replace("|", "/"), fmt_time(r["wall_s"]),
                fmt_time(r.get("cpu_s", 0)), r["commit"],
                r.get("load_before", 0), r["command"]))
    out.append("")


def run_precision(t, row, rec):
    """The training precision of a run's record (precision_rows.record_precision); "—" for the speed
    rows, which train nothing."""
    return precision_rows.record_precision(rec) if t.rows[row][2] != "bench" else "—"


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


def write(root, rows, load, path="", heatmaps=(), runs=""):
    t = Table(root, rows, load)
    out = ["# SimA's claims at Fashion-MNIST scale\n",
           "Generated by `python3 results/reproduce.py report` from the records in `results/runs/`;"
           " `python3 results/reproduce.py run` makes the missing ones (see the script's header)."
           " Do not edit by hand: the discussion comes from `results/discussion.md`.\n"]
    runs = runs or os.path.join(root, "results", "runs")
    path = path or os.path.join(root, "docs", "RESULTS.md")
    n = report_budget.budget_section(t, out, runs)

    report_protocol.protocol_section(out)
    report_protocol.sweep_section(runs, out)
    report_protocol.widths_section(runs, out)

    report_claims.claim1_section(t, out)
    report_precision.bf16_section(t, out)
    report_claims.width_section(t, out, runs)
    out.extend(quickstart_precision.section(os.path.join(runs, "quickstart_precision")))
    report_claims.claims_2_to_5_intro(out, report_protocol.sweep_gain(runs, "deit_sima", 100))
    report_claims.claim2_section(t, out, runs)
    report_claims.claim3_section(t, out, runs)
    report_claims.claim4_section(t, out)
    report_precision.fp16_section(t, out)  # claim 4's rows again at float16
    report_claims.claim5_section(t, out, root)
    tta_section(t, out)
    practitioner.section(t, root, os.path.join(os.path.dirname(path), "results", practitioner.PNG),
                         "results/" + practitioner.PNG, out)
    report_claim6.section(t, out)
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
