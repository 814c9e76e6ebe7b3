#!/usr/bin/env python3
"""results/fp16_headroom.py with a fake trainer: each probe runs claim 4's config at fp16 for STEPS steps
with the scale's overrides, keeps its step records' peaks (overall and the attention cores'), deletes its
run folder once recorded, and the table gives each peak with float16's headroom; a failed probe says why."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_bin  # noqa: E402
import fp16_headroom as fh  # noqa: E402
import report_precision  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


# The fake sima-train logs STEPS step records whose peaks grow with the model width it was given (48
# unless --set model.embed_dim=...), the attention's part a tenth; FAKE_FAIL makes it fail.
FAKE = r'''#!%s
import json, os, sys
a = sys.argv
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
sets = dict(a[i + 1].split("=", 1) for i, x in enumerate(a) if x == "--set")
json.dump(sets, open(os.path.join(out, "sets.json"), "w"))
if os.environ.get("FAKE_FAIL"):
    print("sima-train: the loss is not finite (inf)")
    sys.exit(1)
width = float(sets.get("model.embed_dim", 48))
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    for s in range(1, int(sets["train.max_steps"]) + 1):
        f.write(json.dumps({"kind": "step", "step": s, "loss": 2.3, "fp16_forward_peak": width * s,
                            "fp16_forward_peak_attention": width * s / 10}) + "\n")
''' % sys.executable

with tempfile.TemporaryDirectory() as d:
    fh.BIN = fake_bin.install(d, FAKE, ("sima-train",))
    import runner  # noqa: E402
    runner.BIN = fh.BIN
    fh.RECORDS, fh.OUT = os.path.join(d, "records"), os.path.join(d, "runs")
    scale, _, sets = fh.SCALES[1]
    rec = fh.run_one(scale, sets, "none", "xcit_sima_nonorm")
    out = os.path.join(fh.OUT, "%s_none" % scale)
    check(rec["exit_code"] == 0 and len(rec["steps"]) == fh.STEPS and fh.peak(rec) == 384.0 * fh.STEPS
          and abs(fh.peak(rec, "fp16_forward_peak_attention") - 38.4 * fh.STEPS) < 1e-9, "probe record: %r" % rec)
    check("--set model.embed_dim=384" in rec["command"] and "--set train.precision=fp16" in rec["command"]
          and "--set data.validation=10000" in rec["command"] and "configs/paper/xcit_sima_nonorm.json" in rec["command"]
          and "OMP_NUM_THREADS=1 " in rec["command"], "probe command: %s" % rec["command"])
    check(not os.path.exists(out), "the run folder is deleted once recorded")
    check(json.load(open(fh.record_path(scale, "none")))["steps"] == rec["steps"], "record written")
    os.environ["FAKE_FAIL"] = "1"
    bad = fh.run_one("study", [], "l1", "xcit_sima")
    del os.environ["FAKE_FAIL"]
    check(bad["exit_code"] == 1 and "not finite" in bad["error"], "failed probe: %r" % bad)
    lines = fh.table(fh.load(fh.RECORDS))
    check(len(lines) == 2 + len(fh.SCALES), "table lines: %r" % lines)
    check(lines[2].startswith("| this study's XCiT") and "| failed: sima-train: the loss is not finite (inf) |" in lines[2]
          and lines[2].endswith("| not run | not run |"), "study line: %r" % lines[2])
    want = "| not run | not run | 1152 (115), 57× |"
    check(lines[3].endswith(want), "paper-scale line %r should end %r" % (lines[3], want))
    # The report's paragraph: the table, and the probes' CPU.
    out_lines = []
    report_precision.headroom_section(out_lines, fh.RECORDS)
    text = "\n".join(out_lines)
    check("How close the forward starts to float16's limit" in text and want in text and "2 probes recorded" in text,
          "report paragraph: " + text)

finish()
