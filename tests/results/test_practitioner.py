#!/usr/bin/env python3
"""results/practitioner.py, the report's "which attention should I use on a CPU?" picture, on
made-up records: the top-1 bar is the analytic interval; a latency point only for a row whose
variant the batch-1 bench ran with the row's options (the others named with the reason); CPU-hours
from the epochs to the target times the timing runs' median CPU seconds per epoch; 90 % when no run
reached 92 %; the section writes the PNG and names what each panel leaves out."""
import os
import sys
import tempfile
import types

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "results"))
import practitioner as pr  # noqa: E402
import verdicts  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def bench(variant, ms, order=None, tokens=197):
    b = {"variant": variant, "batch": 1, "tokens": tokens, "dim": 384, "heads": 6, "forward_ms": ms, "train_ms": 2 * ms,
         "threads": 2}
    if order:
        b["order"] = order
    return b


def run(seed, top1, reach90):
    return {"seed": seed, "exit_code": 0, "top1": top1, "eval": {"count": 10000},
            "epochs": [{"epoch": e, "val_top1": 90.5 if e >= reach90 else 80.0} for e in range(1, 11)]}


timing = {"exit_code": 0, "epochs": [{"epoch": 1, "epoch_seconds": 9.0, "epoch_cpu_seconds": 99.0},
                                     {"epoch": 2, "epoch_seconds": 5.0, "epoch_cpu_seconds": 360.0},
                                     {"epoch": 3, "epoch_seconds": 5.0, "epoch_cpu_seconds": 720.0}]}
records = {
    pr.LATENCY_ROW: [{"command": "sima-bench", "date": "d", "bench": [
        bench("softmax", 2.0), bench("sima", 1.0, "qk_first"), bench("sima", 1.5, "auto"), bench("relu", 1.8),
        bench("nystromformer", 3.0), bench("cosformer", 1.2), bench("softmax", 9.0, tokens=401)]}],
    "e50_deit_softmax": [run(0, 90.0, 4), run(1, 92.0, 6)],
    "e50_deit_sima": [run(0, 91.0, 5)],
    "tta_deit_softmax": [timing],
}
t = types.SimpleNamespace(records=records)

# top-1: mean 91 of 90 and 92, the 95 % interval of the analytic form; one seed: no bar.
mean, bar = pr.top1_point(t, "e50_deit_softmax")
e = verdicts.analytic([[90.0, 92.0]], [1])
check(mean == 91.0 and bar == verdicts.interval(e, 0.95), "top-1 point: %r" % ((mean, bar),))
check(pr.top1_point(t, "e50_deit_sima") == (91.0, None) and pr.top1_point(t, "e50_deit_soft") is None, "one seed, none")

# Latency: the fewest tokens' rows; SimA's auto block (the row's order); the rest named with the reason.
got, why, at = pr.latency_points(records, ROOT)
check(got == {"deit_softmax": 2.0, "deit_sima": 1.5, "deit_cosformer": 1.2} and len(at) == 6, "latency: %r" % got)
check("qk_norm = true" in why["deit_relu_attn"] and "num_landmarks = 10" in why["deit_nystromformer"], "why: %r" % why)
check(why["deit_performer"] == "no performer block in %s" % pr.LATENCY_ROW, why["deit_performer"])
check('reweight = "cos1d"' in why["deit_cosformer_cos1d"], why["deit_cosformer_cos1d"])
check(pr.latency_points({}, ROOT)[1]["deit_sima"] == "no %s record" % pr.LATENCY_ROW, "no record")

# CPU-hours: no run reached 92, so 90 %; softmax reached it at epochs 4 and 6 (mean 5, sd √2), its
# timing run's CPU seconds after the first epoch have median 540: 5 × 540 s = 0.75 h.
hours, hwhy, target = pr.cpu_hours_points(t)
check(target == 90.0 and abs(hours["deit_softmax"][0] - 0.75) < 1e-12, "CPU-hours: %r %r" % (target, hours))
lo, hi = hours["deit_softmax"][1]
check(abs(lo - (5 - 2 ** 0.5) * 0.15) < 1e-12 and abs(hi - (5 + 2 ** 0.5) * 0.15) < 1e-12, "CPU-hours bar")
check(hwhy["deit_sima"] == "no timing run with CPU seconds per epoch" and "no finished" in hwhy["deit_soft"], "why: %r" % hwhy)
records["e50_deit_sima"] = [{**run(0, 91.0, 5), "epochs": [{"epoch": 1, "val_top1": 92.5}]}]
check(pr.cpu_hours_points(t)[2] == 92.0, "a run at 92 %: the target stays 92")
records["e50_deit_sima"] = [run(0, 91.0, 5)]

with tempfile.TemporaryDirectory() as d:
    out = []
    png = os.path.join(d, "results", pr.PNG)
    pr.section(t, ROOT, png, "results/" + pr.PNG, out)
    text = "\n".join(out)
    check(os.path.getsize(png) > 1000 and "![%s](results/%s)" % (pr.TITLE, pr.PNG) in text, "picture: %r" % out[:2])
    check("No run reached 92 % validation top-1, so the right panel uses 90 %" in text, "the 90 % line")
    check("Not in the left panel: relu_attn (" in text and "soft (no finished run with a test top-1)" in text, text)

# The whole-model record, when present, replaces the one-block stand-in: its median per row, the
# least and most round as the bar, a row it lacks named.
import latency  # noqa: E402
check(latency.order(0) == latency.CONFIGS and latency.order(1) == tuple(reversed(latency.CONFIGS)),
      "rounds alternate the attentions")
records[latency.ROW] = [{"exit_code": 0, "command": "sima-bench model ...", "date": "d", "rounds": 3, "reps": 51,
                         "bench": [{"row": "deit_sima", "variant": "sima", "latency_b1_ms": 0.4,
                                    "round_ms": [0.5, 0.4, 0.38]}]}]
got, why = pr.model_latency_points(records)
check(got == {"deit_sima": (0.4, (0.38, 0.5))}, "whole-model latency: %r" % got)
check(why.get("deit_softmax") == "not in " + latency.ROW, "a row the record lacks: %r" % why)
with tempfile.TemporaryDirectory() as d:
    out = []
    pr.section(t, ROOT, os.path.join(d, pr.PNG), pr.PNG, out)
    text = "\n".join(out)
    check("**Left**: the whole model's batch-1 forward time at 2 threads" in text and "one attention block" not in text,
          "left panel from the whole-model record: " + text)
records[latency.ROW] = [{"exit_code": 1, "error": "boom"}]
check(pr.model_latency_points(records) is None, "a failed latency record: the stand-in")
del records[latency.ROW]

finish()
