"""The header of docs/RESULTS.md: the CPU every run of the study took, from the records, and this
round's share against its budget.

Every JSON record under results/runs/ with a cpu_s counts once, by where it lies: the table's rows
(results/runs/<row>/s<seed>.json), the epoch sweeps (results/runs/sweeps/), the width sweeps
(results/runs/sweeps/widths/), the runs made before the protocol (results/runs/pre_protocol/), the
quickstart at two precisions (results/runs/quickstart_precision/, results/quickstart_precision.py), the
runs trained again for their per-image records (a record's `per_image` and `per_image_attempts`,
results/rederive.py); the sittings so far of each run cut off and parked (results/runs/parked/<name>/spent.json);
and the attempts discarded before they made a record (results/runs/discarded/: a run stopped and
deleted, its CPU as measured or, where its own files went with it, as estimated then, said in the record).

A round's CPU: the sittings dated from ROUND_START on (runner.run_sitting dates each sitting's end),
and of a record without dated sittings, all of it when the record is dated from then (a run resumed
from an older round then counts whole: the conservative side). Parked sittings without a date were
made before sittings were dated, in an earlier round.
"""
import json
import os

import report_protocol

ROUND_START = "2026-12-01 00:00 UTC"  # round three: the verdict rule, DINO, claims 2 and 3 at convergence
ROUND_BUDGET_H = 60.0  # new CPU-hours this round may spend
PARTS = (("rows", "runs of the tables"), ("sweeps", "epoch-sweep points"), ("widths", "width-sweep points"),
         ("pre_protocol", "runs before the protocol"), ("parked", "parked runs' sittings so far"),
         ("quickstart_precision", "quickstart runs at fp32 and bf16"), ("fp16_headroom", "float16 headroom probes"),
         ("rederive", "runs trained again for their per-image records"),
         ("discarded", "attempts discarded before a record"))
FOLDER_PARTS = {p for p, _ in PARTS} - {"rows", "widths", "rederive"}  # parts named by their folder in results/runs
SINGULAR = {"runs of the tables": "run of the tables", "epoch-sweep points": "epoch-sweep point",
            "width-sweep points": "width-sweep point", "runs before the protocol": "run before the protocol",
            "parked runs' sittings so far": "parked run's sittings so far",
            "quickstart runs at fp32 and bf16": "quickstart run", "float16 headroom probes": "float16 headroom probe",
            "runs trained again for their per-image records": "run trained again for its per-image record",
            "attempts discarded before a record": "attempt discarded before a record"}


def part_of(rel):
    """Which part of the study a record's path (relative to results/runs) belongs to."""
    if rel.startswith(os.path.join("sweeps", "widths") + os.sep):
        return "widths"
    top = rel.split(os.sep)[0]
    return top if top in FOLDER_PARTS else "rows"


def round_cpu(rec, start=ROUND_START):
    """The CPU seconds of a record spent from `start` on."""
    dated = [s for s in rec.get("sittings", []) if s.get("date")]
    if dated:
        return sum(s["cpu_s"] for s in dated if s["date"] >= start)
    return rec.get("cpu_s", 0) if rec.get("date", "") >= start else 0.0


def ledger(runs, start=ROUND_START):
    """{part: [runs, CPU seconds, CPU seconds from start on]} over every record under `runs`."""
    out = {p: [0, 0.0, 0.0] for p, _ in PARTS}
    for dp, _, files in os.walk(runs):
        for f in sorted(files):
            if not f.endswith(".json") or f.endswith(".tmp"):
                continue
            rel = os.path.relpath(os.path.join(dp, f), runs)
            part = part_of(rel)
            try:
                with open(os.path.join(dp, f)) as fh:
                    rec = json.load(fh)
            except ValueError:
                continue
            if part == "parked":
                if f != "spent.json" or not isinstance(rec, list):
                    continue
                rec = {"sittings": rec, "cpu_s": sum(s.get("cpu_s", 0) for s in rec)}
                cpu_new = sum(s["cpu_s"] for s in rec["sittings"] if s.get("date", "") >= start)
            elif not isinstance(rec, dict) or "cpu_s" not in rec:
                continue
            else:
                cpu_new = round_cpu(rec, start)
            out[part][0] += 1
            out[part][1] += rec["cpu_s"]
            out[part][2] += cpu_new
            for a in rederived(rec):  # a run trained again for its per-image record (results/rederive.py)
                out["rederive"][0] += 1
                out["rederive"][1] += a.get("cpu_s", 0)
                out["rederive"][2] += a.get("cpu_s", 0) if a.get("date", "") >= start else 0.0
    return out


def rederived(rec):
    """The re-derivations a record carries: the one that gave its per-image record, and those that did not."""
    return ([rec["per_image"]] if isinstance(rec.get("per_image"), dict) else []) + list(rec.get("per_image_attempts", []))


def budget_section(t, out, runs):
    """The header: CPU spent in all and this round, the projection of the rest, and what the whole table takes."""
    led = ledger(runs)
    total = sum(v[1] for v in led.values())
    new = sum(v[2] for v in led.values())
    parts = ", ".join("%d %s %.1f" % (led[p][0], SINGULAR.get(what, what) if led[p][0] == 1 else what, led[p][1] / 3600)
                      for p, what in PARTS if led[p][0])
    out.append("CPU spent by the study, every run it recorded: %.1f CPU-hours (%s). The first two rounds' limit was 40"
               " CPU-hours; this round (records and sittings dated from %s) may spend at most %.0f new CPU-hours and"
               " has spent %.1f (a record without dated sittings counts whole when it is dated in the round; parked"
               " sittings without a date predate the round).\n"
               % (total / 3600, parts, ROUND_START, ROUND_BUDGET_H, new / 3600))
    total_wall = sum(r["wall_s"] for row in t.rows for r in t.records[row])
    cpu = sum(r.get("cpu_s", 0) for row in t.rows for r in t.records[row])
    n = sum(len(t.records[row]) for row in t.rows)
    pcpu, counted, left = report_protocol.projected_cpu(runs, t.rows)
    if counted:
        out.append("Projected CPU of the training, DINO and time-to-accuracy rows (%d rows, every seed; the sweeps' CPU"
                   " per epoch times each row's planned epochs: its sweep's choice or the budget cap for claim 1 and"
                   " DINO, the fixed budget for claims 2 to 5; a bf16 or fp16 row at its float32 row's CPU per epoch, its"
                   " precision's own cost not measured here; see the protocol): %.1f CPU-hours. Not projected: %s.\n"
                   % (len(counted), pcpu / 3600, ", ".join(left)))
    out.append("%d runs of the tables recorded: %.1f hours of wall time and %.1f CPU-hours in all (training runs went"
               " one or two at a time, one thread each, and each record keeps the load average when it started; the"
               " speed rows alone at two threads).\n" % (n, total_wall / 3600, cpu / 3600))
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
