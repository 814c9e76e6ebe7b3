#!/usr/bin/env python3
"""results/stats.py, the statistics behind docs/RESULTS.md: Student's t quantiles against the
textbook table, Welch's interval against a hand computation, and its formatting (the verdicts: test_verdicts.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import stats  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


# t_0.975 for 1, 2, 4, 10, 30 degrees of freedom and the normal limit (any statistics textbook).
for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (1e7, 1.960)):
    check(abs(stats.t_quantile(0.975, df) - t) < 1e-3, "t_0.975(%g) = %.4f, want %.3f" % (df, stats.t_quantile(0.975, df), t))
check(abs(stats.t_quantile(0.95, 5) - 2.015) < 1e-3, "t_0.95(5)")
check(abs(stats.t_cdf(0.0, 3) - 0.5) < 1e-12, "t_cdf(0) = 0.5")

# Welch by hand: a = 1, 2, 3 (var 1), b = 2, 4, 6, 8 (var 20/3). se^2 = 1/3 + 5/3 = 2;
# df = 4 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 4 / (1/18 + 25/27) = 4.0755; d = 2 - 5 = -3.
w = stats.welch([1, 2, 3], [2, 4, 6, 8])
check(abs(w["d"] + 3) < 1e-12 and abs(w["se"] - 2 ** 0.5) < 1e-12, "welch d, se: %r" % w)
check(abs(w["df"] - 4 / (1 / 18 + 25 / 27)) < 1e-9, "welch df: %r" % w)
h = stats.t_quantile(0.975, w["df"]) * 2 ** 0.5
check(abs(w["lo"] + 3 + h) < 1e-9 and abs(w["hi"] + 3 - h) < 1e-9, "welch interval: %r" % w)
check(2.75 < h / 2 ** 0.5 < 2.78, "t at 4.08 df between t(4) and t(5)")

# A contrast of four means by hand (Welch-Satterthwaite): a, b as above, c = 0, 0, 3 (mean 1, var 3),
# e = 4, 6 (mean 5, var 2); d = 2 - 5 - 1 + 5 = 1, se^2 = 1/3 + 5/3 + 1 + 1 = 4,
# df = 16 / ((1/3)^2 / 2 + (5/3)^2 / 3 + 1 / 2 + 1 / 1). Weights scale the variance by their square.
c = stats.contrast([[1, 2, 3], [2, 4, 6, 8], [0, 0, 3], [4, 6]], [1, -1, -1, 1])
check(abs(c["d"] - 1) < 1e-12 and abs(c["se"] - 2) < 1e-12, "contrast d, se: %r" % c)
check(abs(c["df"] - 16 / (1 / 18 + 25 / 27 + 1.5)) < 1e-9, "contrast df: %r" % c)
h4 = stats.t_quantile(0.975, c["df"]) * 2
check(abs(c["lo"] - 1 + h4) < 1e-9 and abs(c["hi"] - 1 - h4) < 1e-9 and c["ns"] == [3, 4, 3, 2], "contrast interval: %r" % c)
c2 = stats.contrast([[1, 2, 3]], [2])
check(abs(c2["d"] - 4) < 1e-12 and abs(c2["se"] - 2 / 3 ** 0.5) < 1e-12, "contrast weight 2: %r" % c2)
check(stats.welch([1, 2, 3], [2, 4, 6, 8]) == stats.contrast([[1, 2, 3], [2, 4, 6, 8]], [1, -1]), "welch = contrast +1, -1")
check(stats.fmt_welch(stats.welch([1], [2, 3])) == "\u22121.50", "fmt without interval")

finish()
