#!/usr/bin/env python3
"""The report's claim 6 (results/report_claim6.py) on toy records: each DINO row's seeds in the table
(one seed's value, or mean ± std), a seed that failed named, the targets against the raw pixels' 20-NN
from the row's own record and against 88 % by linear probe, and SimA − XCA: a bare difference with one
seed a side, an interval and a verdict (analytic form, Holm over the two measures) with two."""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import report  # noqa: E402
import report_claim6  # noqa: E402
import verdicts  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def frozen(k20, lp):
    return {"result": {"knn": {"results": [{"k": 10, "top1": k20 + 1}, {"k": 20, "top1": k20},
                                           {"k": 100, "top1": k20 - 1}]}, "linear_probe": {"top1": lp}}}


def table(xca, sima, seeds=2):
    """A report table over the two DINO rows, each a list of records by seed."""
    recs = {"dino_xcit_xca": xca or [], "dino_xcit_sima": sima or []}
    return report.Table("", [(r, "", "dino", seeds) for r in recs],
                        lambda row, seed: recs[row][seed] if seed < len(recs[row]) else None)


def lines(xca, sima, seeds=2):
    return " ".join(report_claim6.target_lines(table(xca, sima, seeds)))


pixels = {"pixels": frozen(85.7, 85.0), "init": frozen(70.0, 50.0)}
xca = {"seed": 0, "exit_code": 0, "wall_s": 60.0, "cpu_s": 50.0, "eval": frozen(80.0, 78.5), "baselines": pixels}
sima = dict(xca, eval=frozen(86.0, 88.0))

# One seed a side: the targets and a bare difference.
check(lines(None, None) == "", "no record: " + lines(None, None))
low = lines([xca], [dict(sima, eval=frozen(79.0, 78.0))])
check("Targets (test set, seed 0)" in low and "SimA − XCA: 20-NN −1.00, linear probe −0.50 (one seed each, so no"
      " interval" in low, "SimA behind: " + low)
both = lines([xca], [sima])
check("XCA: 20-NN 80.00, not above the raw pixels' 85.70: missed; linear probe 78.50 against 88.0: missed." in both
      and "SimA: 20-NN 86.00, above the raw pixels' 85.70: met; linear probe 88.00 against 88.0: met." in both
      and "SimA − XCA: 20-NN +6.00, linear probe +9.50 (one seed each" in both, "both: " + both)
one = lines([xca], [dict(sima, exit_code=1, error="x")])
check("XCA: 20-NN 80.00" in one and "SimA" not in one, "SimA failed: " + one)
uneven = lines([xca, dict(xca, seed=1, eval=frozen(81.0, 79.5))], [sima])
check("XCA (mean of 2 seeds): 20-NN 80.50" in uneven and "(one seed on a side, so no interval" in uneven,
      "two seeds against one: " + uneven)

# Two seeds a side: the interval is verdicts' analytic form of the same numbers, Holm over the two measures.
x2 = [xca, dict(xca, seed=1, eval=frozen(80.6, 78.9))]
s2 = [dict(sima, eval=frozen(81.0, 78.2)), dict(sima, seed=1, eval=frozen(81.4, 78.0))]
two = lines(x2, s2)
fam = [(verdicts.estimate([[(81.0, None), (81.4, None)], [(80.0, None), (80.6, None)]], [1, -1]), -0.4),
       (verdicts.estimate([[(78.2, None), (78.0, None)], [(78.5, None), (78.9, None)]], [1, -1]), -0.3)]
j = verdicts.judge(fam)
want = "20-NN " + ("%+.2f [%+.2f, %+.2f]" % (j[0]["d"], j[0]["lo"], j[0]["hi"])).replace("-", "−")
check(want + " (%.1f %%)" % (100 * j[0]["level"]) in two and "SimA − XCA (2 and 2 seeds; seeds + test set, analytic"
      in two and "Holm over the two measures" in two and "the paper's −0.40 and −0.30" in two,
      "two seeds, interval %s: %s" % (want, two))
check(abs(j[0]["d"] - 0.9) < 1e-9 and j[0]["verdict"] == "inconclusive" and "inconclusive" in two,
      "two seeds, verdict: %r" % j[0])
check("(mean of 2 seeds): 20-NN 81.20" in two and "Targets (test set, over the seeds)" in two, "means: " + two)
# A difference the interval resolves gets its direction against the paper's (SimA behind at 20-NN).
far = lines(x2, [dict(s, eval=frozen(70.0 + 0.1 * i, 60.0 + 0.1 * i)) for i, s in enumerate(s2)])
check("same direction" in far and "opposite direction" not in far, "resolved: " + far)

# The table: mean ± std (n seeds) where a row has two, one seed's value otherwise; baselines from the
# first record; a failed seed named beside the ones that finished; a partial row says so.
out = []
report_claim6.section(table(x2, [s2[0]]), out)
text = "\n".join(out)
k20 = statistics.mean([80.0, 80.6]), statistics.stdev([80.0, 80.6])
check("| DINO teacher, XCiT, XCA | 81.30 ± 0.42 (2 seeds) / %.2f ± %.2f (2 seeds) /" % k20 in text,
      "XCA line: " + text)
check("| DINO teacher, XCiT, SimA | 82.00 / 81.00 / 80.00 (1 of 2 seeds) | 78.20 | 1:00 (CPU 0:50) |" in text,
      "SimA line, one of two seeds: " + text)
check("| XCiT, XCA freshly initialised (no training) | 71.00 / 70.00 / 69.00 | 50.00 | — | — |" in text
      and "| raw pixels | 86.70 / 85.70 / 84.70 | 85.00 | — | — |" in text, "baselines: " + text)
out = []
report_claim6.section(table(x2, [s2[0], dict(sima, seed=1, exit_code=1, error="loss is nan")]), out)
text = "\n".join(out)
check("82.00 / 81.00 / 80.00; seed 1 failed: loss is nan |" in text, "a failed seed named: " + text)
check("class-attention tokens" not in text, "no two-token line without its evaluation: " + text)

# The teacher scored with both class-attention tokens too (reproduce.py's eval_blocks2), on seed 1 only:
# its own table line naming the seed, the sentence that says what it is, and its own targets.
x2b = [x2[0], dict(x2[1], eval_blocks2=frozen(84.0, 86.0))]
s2b = [s2[0], dict(s2[1], eval_blocks2=frozen(86.5, 88.5))]
out = []
report_claim6.section(table(x2b, s2b), out)
text = "\n".join(out)
check("| DINO teacher, XCiT, XCA: 2 class-attention tokens | 85.00 / 84.00 / 83.00 (seed 1) | 86.00 | — | — |" in text
      and "| DINO teacher, XCiT, SimA: 2 class-attention tokens | 87.50 / 86.50 / 85.50 (seed 1) | 88.50 | — | — |"
      in text, "two-token lines: " + text)
check("`sima-eval --feature-blocks 2`" in text, "two-token sentence: " + text)
check("Targets (test set, seed 1; both class-attention tokens concatenated)" in text
      and "SimA: 20-NN 86.50, above the raw pixels' 85.70: met; linear probe 88.50 against 88.0: met." in text
      and "SimA − XCA: 20-NN +2.50, linear probe +2.50 (one seed each" in text, "two-token targets: " + text)
check("Targets (test set, over the seeds): " in text and "XCA (mean of 2 seeds): 20-NN 80.30" in text,
      "last-token targets unchanged: " + text)

finish()
