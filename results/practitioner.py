"""The practitioner's picture of docs/RESULTS.md, "which attention should I use on a CPU?": one PNG
(docs/results/practitioner.png, drawn by results/png_plot.py) with two panels, one point per DeiT
attention of claim 5, its test top-1 against

- its batch-1 CPU latency: the whole DeiT's, from the row latency.ROW (results/latency.py: sima-bench
  model --batch 1 per claim-5 config, rounds alternating the attentions; bar: the least and the most
  round). Without that record, a stand-in: the forward time of one attention block at batch 1 from the
  Figure 1 bench record (LATENCY_ROW, the shape with the fewest tokens), a row counting only when the
  bench ran its variant with the row's options (the bench builds every variant at its defaults);
- the training CPU-hours to reach TARGET validation top-1: the time-to-accuracy table's epochs (claim
  5's runs, results/tta.py) times the median CPU seconds per epoch of its 2-thread timing runs. When
  no run reached TARGET, the highest of tta.TARGETS that a run reached, and the page says so.

The top-1 bar is the 95 % interval of the row's mean in the claim tables' unpaired form (the seeds'
variance over n plus the test set's binomial variance, results/verdicts.py analytic); the CPU-hours
bar is one standard deviation of the epochs over the seeds. A row missing a measurement is left out
of that panel and named under the picture with the reason."""
import glob
import json
import os
import statistics

import disclosure
import fixed
import latency
import png_plot
import report_claims
import tta
import verdicts

LATENCY_ROW = "bench_fig1_tokens"
TARGET = 92.0
TITLE = "which attention should I use on a CPU?"
PNG = "practitioner.png"  # beside speed.md, in the folder results/ next to RESULTS.md


def label(row):
    return row[len("deit_"):] if row.startswith("deit_") else row


def top1_point(t, row):
    """(mean test top-1, (low, high) or None) of a row's finished seeds, or None when none finished."""
    vals = [x for x, _ in report_claims.runs(t, row)]
    if not vals:
        return None
    e = verdicts.analytic([vals], [1], report_claims.n_test(t, [row]))
    lo, hi = verdicts.interval(e, 0.95)
    return e["d"], ((lo, hi) if lo is not None else None)


def latency_block(records):
    """(the batch-1 bench rows at the fewest tokens, the record), or ([], record or None)."""
    rec = (records.get(LATENCY_ROW) or [None])[0]
    bench = [b for b in (rec or {}).get("bench", []) if "error" not in b and b.get("batch") == 1]
    if not bench:
        return [], rec
    n = min(b["tokens"] for b in bench)
    return [b for b in bench if b["tokens"] == n], rec


def model_latency_points(records):
    """({row: (median batch-1 ms, (least, most) over rounds)}, {row: why not}) from the whole-model
    record (latency.ROW), or None when it is not recorded."""
    rec = (records.get(latency.ROW) or [None])[0]
    if not rec or rec.get("exit_code") or not rec.get("bench"):
        return None
    by_row = {b["row"]: b for b in rec["bench"]}
    got, why = {}, {}
    for row, _ in report_claims.CLAIM5:
        b = by_row.get(row)
        if b is None:
            why[row] = "not in %s" % latency.ROW
        else:
            got[row] = (b["latency_b1_ms"], (min(b["round_ms"]), max(b["round_ms"])) if len(b["round_ms"]) > 1 else None)
    return got, why


def latency_points(records, root):
    """({row: forward ms}, {row: why it is not in the panel}, the bench rows used): one attention block's
    forward, the stand-in when the whole-model record is missing."""
    at, rec = latency_block(records)
    got, why = {}, {}
    defaults = disclosure.option_defaults(root)
    for row, _ in report_claims.CLAIM5:
        f = disclosure.row_facts(root, row)
        away = [k for k in f["set"] if f["opts"][k] != defaults.get(k)]
        b = next((b for b in at if b["variant"] == f["variant"] and
                  b.get("order", f["opts"]["order"]) == f["opts"]["order"]), None)
        if not at:
            why[row] = "no %s record" % LATENCY_ROW
        elif b is None:
            why[row] = "no %s block in %s" % (f["variant"], LATENCY_ROW)
        elif away:
            why[row] = "%s's block ran at its defaults, this row sets %s" % (
                f["variant"], ", ".join("%s = %s" % (k, json.dumps(f["opts"][k])) for k in away))
        else:
            got[row] = b["forward_ms"]
    return got, why, at


def reached_target(sums):
    """TARGET if some row reached it, else the highest of tta.TARGETS some row reached (TARGET if none)."""
    hit = [x for s, _ in sums.values() if s["targets"] for x, v in s["targets"].items() if v[0]]
    return TARGET if TARGET in hit or not hit else max(hit)


def cpu_hours_points(t):
    """({row: (CPU hours, (low, high) or None)}, {row: why it is not in the panel}, target)."""
    sums = {}
    for row, _ in report_claims.CLAIM5:
        timings = t.records.get(tta.PREFIX + row, [])
        sums[row] = (tta.summary(t.records.get(fixed.PREFIX + row, []), timings), timings)
    target = reached_target(sums)
    got, why = {}, {}
    for row, (s, timings) in sums.items():
        cpu = tta.timed_epochs(timings, "epoch_cpu_seconds")
        hit, of, mean, sd, _ = s["targets"][target] if s["targets"] else (0, 0, None, None, None)
        if not s["targets"]:
            why[row] = "no finished %s run" % (fixed.PREFIX + row)
        elif not hit:
            why[row] = "no seed reached %g %% (0 of %d)" % (target, of)
        elif not cpu:
            why[row] = "no timing run with CPU seconds per epoch"
        else:
            per = statistics.median(cpu) / 3600.0
            got[row] = (mean * per, ((mean - sd) * per, (mean + sd) * per) if sd else None)
    return got, why, target


def history_latencies(root):
    """The (model, attention) pairs whose whole-model batch-1 latency results/bench_history/ records."""
    pairs = set()
    for path in glob.glob(os.path.join(root, "results", "bench_history", "*.json")):
        with open(path) as f:
            for r in json.load(f).get("results", []):
                if (r.get("medians", {}).get("ours") or {}).get("latency_b1_ms") is not None:
                    pairs.add((r.get("case", "?"), r.get("attn", "?")))
    return sorted(pairs)


def points(values, tops, colors):
    """Panel points of the rows with both a value and a top-1; value: x or (x, (low, high) or None)."""
    out = []
    for row, v in values.items():
        if tops.get(row) is None:
            continue
        x, xerr = v if isinstance(v, tuple) else (v, None)
        out.append({"label": label(row), "x": x, "xerr": xerr, "y": tops[row][0], "yerr": tops[row][1],
                    "color": colors[row]})
    return out


def left_out(why, tops):
    """The rows not in a panel, each with its reason (a row without a top-1 says that first)."""
    rows = [r for r, _ in report_claims.CLAIM5 if r in why or tops.get(r) is None]
    return "; ".join("%s (%s)" % (label(r), "no finished run with a test top-1" if tops.get(r) is None else why[r])
                     for r in rows) or "none"


def draw(t, root, png_path):
    """Writes the PNG; returns what the page says about it."""
    tops = {row: top1_point(t, fixed.PREFIX + row) for row, _ in report_claims.CLAIM5}
    colors = {row: png_plot.PALETTE[i % len(png_plot.PALETTE)] for i, (row, _) in enumerate(report_claims.CLAIM5)}
    whole = model_latency_points(t.records)
    if whole:
        (lat, lat_why), at = whole, []
        left = ("top-1 against batch-1 latency of the whole DeiT (28 px)", "forward ms, batch 1, 2 threads")
    else:
        lat, lat_why, at = latency_points(t.records, root)
        shape = ("N %d, C %d, %d heads" % (at[0]["tokens"], at[0]["dim"], at[0]["heads"])) if at else "no record"
        left = ("top-1 against batch-1 latency of one attention block (%s)" % shape,
                "forward ms, batch 1, %d threads" % (at[0].get("threads", 0) if at else 0))
    hours, hours_why, target = cpu_hours_points(t)
    panels = [(points(lat, tops, colors), left[0], left[1], "test top-1 (%)"),
              (points(hours, tops, colors), "top-1 against training CPU-hours to %g %% validation top-1" % target,
               "CPU-hours (2-thread timing runs)", "test top-1 (%)")]
    os.makedirs(os.path.dirname(png_path), exist_ok=True)
    png_plot.figure(png_path, TITLE, panels)
    return {"tops": tops, "lat_why": lat_why, "hours_why": hours_why, "target": target, "at": at, "whole": bool(whole)}


def stand_in_text(t, root, d):
    """What the left panel shows without the whole-model record: one attention block's forward."""
    rec = (t.records.get(LATENCY_ROW) or [{}])[0]
    hist = ", ".join("%s with %s" % p for p in history_latencies(root)) or "no attention"
    used = ("the batch-1 forward time of one attention block at the Figure 1 shape with the fewest tokens (`%s`,"
            " `%s`, %s; %d round%s, so no bar)" % (LATENCY_ROW, rec.get("command", "?"), rec.get("date", "?"),
                                                   rec.get("rounds", 1), "s" * (rec.get("rounds", 1) != 1))
            if d["at"] else "the batch-1 attention blocks of `%s`, which is not recorded" % LATENCY_ROW)
    return ("no record holds a batch-1 latency of this study's DeiT per attention (`results/bench_history/` has"
            " whole-model batch-1 latencies of %s only; `reproduce.py run --rows %s` measures it), so the panel"
            " uses what exists: %s" % (hist, latency.ROW, used))


def whole_model_text(t):
    """What the left panel shows from the whole-model record."""
    m = (t.records.get(latency.ROW) or [{}])[0]
    return ("the whole model's batch-1 forward time at 2 threads (`%s`: `%s`, %s; the median of %d rounds that"
            " alternate the attentions, each sima-bench's median of %d passes; bar: the least and the most round)"
            % (latency.ROW, m.get("command", "?"), m.get("date", "?"), m.get("rounds", 0), m.get("reps", 0)))


def section(t, root, png_path, link, out):
    """The picture and the lines under it: its sources, and which rows each panel leaves out."""
    d = draw(t, root, png_path)
    out.append("### Which attention should I use on a CPU?\n")
    out.append("![%s](%s)\n" % (TITLE, link))
    left = whole_model_text(t) if d["whole"] else stand_in_text(t, root, d)
    out.append("Each point is one attention of claim 5's DeiT: its test top-1, the mean over its seeds with a bar"
               " for the 95 %% interval of the seeds' spread and the test set's binomial noise (the claim tables'"
               " unpaired form). **Left**: %s. **Right**: CPU-hours to the first epoch at %g %% validation top-1,"
               " the time-to-accuracy table's epochs times the median CPU seconds per epoch of its 2-thread timing"
               " runs (bar: ± one standard deviation of the epochs over seeds).\n" % (left, d["target"]))
    if d["target"] != TARGET:
        out.append("No run reached %g %% validation top-1, so the right panel uses %g %%, the highest target of the"
                   " time-to-accuracy table that a run reached.\n" % (TARGET, d["target"]))
    out.append("Not in the left panel: %s. Not in the right panel: %s.\n" % (
        left_out(d["lat_why"], d["tops"]), left_out(d["hours_why"], d["tops"])))
