#!/usr/bin/env python3
"""results/verdicts.py, the verdict rule of docs/RESULTS.md: a case for each verdict, an interval
flagged for df < 2, a family where Holm's correction changes a verdict, the analytic variance by
hand, the paired bootstrap against its closed form on a toy case, McNemar's exact test by hand and
the per-image hex records."""
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import verdicts as v  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def est(d, se, df=math.inf):
    return {"d": d, "se": se, "df": df, "ns": [3, 3], "form": "analytic"}


# One verdict each (family of one, so no correction): the paper's side, the other side, a paper that
# reports no effect, inside the +/-0.3 margin, and too wide to say.
cases = [(est(-1.0, 0.2), -0.4, "same direction"), (est(+1.0, 0.2), -0.4, "opposite direction"),
         (est(+1.0, 0.2), None, "an effect (positive)"), (est(-1.0, 0.2), 0.0, "an effect (negative)"),
         (est(0.02, 0.05), -0.4, "no effect (within ±0.3)"), (est(0.2, 0.5), -0.4, "inconclusive")]
for e, paper, want in cases:
    got = v.judge([(e, paper)])[0]
    check(got["verdict"] == want, "verdict of %r (paper %s): %r, want %r" % (e, paper, got["verdict"], want))
    check(got["level"] == 0.95 and got["lo"] < e["d"] < got["hi"], "a family of one: the 95 %% interval: %r" % got)

# df < 2 is flagged, and its interval is Student's at those df (t_0.975(1.5) is about 6.7).
j = v.judge([(est(1.0, 0.2, df=1.5), 1.0)])[0]
check("df 1.5 < 2" in j["flag"], "df < 2 not flagged: %r" % j)
check(abs((j["hi"] - j["lo"]) / 2 / 0.2 - v.stats.t_quantile(0.975, 1.5)) < 1e-9, "df 1.5 interval: %r" % j)
check(v.judge([(est(1.0, 0.2, df=2.5), 1.0)])[0]["flag"] == "", "df 2.5 flagged")

# Holm: p = 0.03 alone is "same direction"; in a family of three with p 0.03, 0.04, 0.5 its Holm
# p is 3 x 0.03 = 0.09, so it becomes inconclusive; its interval is at 1 - 0.05/3 and holds 0.
z = statistics.NormalDist().inv_cdf(1 - 0.03 / 2)  # d / se with two-sided p = 0.03
a = est(z * 0.5, 0.5)
check(v.judge([(a, 1.0)])[0]["verdict"] == "same direction", "p = 0.03 alone")
fam = v.judge([(a, 1.0), (est(statistics.NormalDist().inv_cdf(1 - 0.02) * 0.5, 0.5), 1.0), (est(0.3, 0.5), 1.0)])
check(fam[0]["verdict"] == "inconclusive", "Holm did not change the verdict: %r" % fam[0])
check(abs(fam[0]["p"] - 0.09) < 1e-9 and abs(fam[1]["p"] - 0.09) < 1e-9, "Holm p: %r" % [f["p"] for f in fam])
check(abs(fam[0]["level"] - (1 - 0.05 / 3)) < 1e-12 and fam[0]["lo"] < 0, "Holm level: %r" % fam[0])
check(v.holm([0.01, None, 0.04, 0.03]) == [0.03, None, 0.06, 0.06], "holm: %r" % v.holm([0.01, None, 0.04, 0.03]))

# The analytic form by hand: rows 90, 92 (mean 91, var 2) and 89, 89, 92 (mean 90, var 3); N = 10 000.
# var = 2/2 + 3/3 + 0.91 * 0.09 + 0.90 * 0.10 = 2.1719 points^2 (p(1-p)/N * 1e4 = p(1-p) in points^2
# at N = 10 000); df = 2.1719^2 / (1^2 / 1 + 1^2 / 2).
e = v.analytic([[90, 92], [89, 89, 92]], [1, -1])
check(abs(e["d"] - 1) < 1e-12 and abs(e["se"] ** 2 - 2.1719) < 1e-9, "analytic se: %r" % e)
check(abs(e["df"] - 2.1719 ** 2 / 1.5) < 1e-9, "analytic df: %r" % e)
check(v.analytic([[90], [91, 92]], [1, -1])["se"] is None, "one seed: no interval")

# The paired bootstrap against its closed form: one run a side (no seeds to resample), N images.
# The replicates' variance is that of a mean of N draws of d_i = a_i - b_i: (mean(d^2) - mean(d)^2) / N
# (points^2 x 1e4). 600 images: 60 only a right, 30 only b right, 400 both, 110 neither.
n = 600
a_bits = [1] * 60 + [0] * 30 + [1] * 400 + [0] * 110
b_bits = [0] * 60 + [1] * 30 + [1] * 400 + [0] * 110
bs = v.bootstrap([[a_bits], [b_bits]], [1, -1], reps=4000, seed=1)
d = [x - y for x, y in zip(a_bits, b_bits)]
closed = (statistics.mean(x * x for x in d) - statistics.mean(d) ** 2) / n * 1e4
sd = statistics.pstdev(bs["draws"])
check(abs(bs["d"] - 5.0) < 1e-9, "bootstrap d: %r" % bs["d"])
check(abs(sd * sd / closed - 1) < 0.08, "bootstrap variance %.4f against the closed form %.4f" % (sd * sd, closed))
check(abs(statistics.mean(bs["draws"]) - 5.0) < 0.1, "bootstrap centre")
lo, hi = v.interval(bs, 0.95)
check(abs((hi - lo) / 2 / math.sqrt(closed) - 1.96) < 0.2, "bootstrap interval against 1.96 se: %r" % ((lo, hi),))
# the unpaired analytic form of the same two models is wider: pairing removes the shared errors
check(math.sqrt(closed) < math.sqrt(0.77 * 0.23 / n * 1e4 + 0.72 * 0.28 / n * 1e4), "paired not narrower")
# seeds resampled too: two identical seeds a side add nothing; the estimate picks the bootstrap
two = v.estimate([[(76.7, a_bits), (76.7, a_bits)], [(71.7, b_bits), (71.7, b_bits)]], [1, -1])
check(two["form"] == "paired bootstrap" and abs(two["d"] - 5.0) < 1e-9, "estimate with bits: %r" % two["form"])
check(v.estimate([[(76.7, a_bits), (76.0, None)], [(71.7, b_bits), (71.0, b_bits)]], [1, -1])["form"] == "analytic",
      "a run without bits: the analytic form")
one = v.estimate([[(76.7, a_bits)], [(71.7, b_bits)]], [1, -1])
check(one["form"] == "analytic" and one["se"] is None and v.judge([(one, 1.0)])[0]["verdict"].startswith("no interval"),
      "one seed a side: no interval")
check("2 seeds" in v.judge([(two, 1.0)])[0]["flag"], "a 2-seed bootstrap is flagged")
# Seeds paired (one recipe at two precisions, seed s from the same weights and batches): the seed
# shift both rows share (80 % vs 70 % here) cancels, leaving the 2-point gap and the images' noise;
# drawn unpaired, the seeds' 10-point spread dominates.
N = 1000
bits = lambda right: [1] * right + [0] * (N - right)  # noqa: E731
rows = [[bits(800), bits(700)], [bits(780), bits(680)]]
paired = v.bootstrap(rows, [1, -1], reps=3000, seed=2, paired_seeds=True)
unpaired = v.bootstrap(rows, [1, -1], reps=3000, seed=2)
sd_p, sd_u = statistics.pstdev(paired["draws"]), statistics.pstdev(unpaired["draws"])
check(abs(paired["d"] - 2.0) < 1e-9 and abs(statistics.mean(paired["draws"]) - 2.0) < 0.05, "paired seeds: centre")
# Given the seeds, only the images vary: the same seed drawn twice (probability 1/2) leaves 20 images
# at x = 100 (variance 100^2 * 0.02 * 0.98 / N), the two seeds once each 40 at x = 50
# (50^2 * 0.04 * 0.96 / N); the draws' variance is the mixture's.
want = math.sqrt(0.5 * (1e4 * 0.02 * 0.98 + 2500 * 0.04 * 0.96) / N)
check(abs(sd_p / want - 1) < 0.1, "paired seeds: sd %.3f, want %.3f (the images' alone)" % (sd_p, want))
check(sd_u > 3 * sd_p and paired["seeds_paired"] and not unpaired["seeds_paired"],
      "unpaired seeds not wider: %.3f vs %.3f" % (sd_u, sd_p))

p2, pt = v.p_values(bs)
check(p2 < 0.01 and pt > 0.5, "bootstrap p-values: %r" % ((p2, pt),))

# With seeds too: two rows of two seeds on 200 images. The bootstrap's variance in closed form, by the
# law of total variance over the 16 equally likely seed draws: E[Var_images | seeds] + Var[mean | seeds].
import itertools  # noqa: E402
rs = __import__("random").Random(3)
toy = [[[int(rs.random() < p) for _ in range(200)] for p in (0.8, 0.7)], [[int(rs.random() < p) for _ in range(200)] for p in (0.6, 0.75)]]
means, variances = [], []
for pick in itertools.product(range(2), repeat=4):
    a = {}
    for k, (row, w) in enumerate(((0, 1), (0, 1), (1, -1), (1, -1))):
        a[(row, pick[k])] = a.get((row, pick[k]), 0.0) + w / 2
    x = [100 * sum(w * toy[r][s][i] for (r, s), w in a.items()) for i in range(200)]
    means.append(statistics.mean(x))
    variances.append(statistics.pvariance(x) / 200)
closed2 = statistics.mean(variances) + statistics.pvariance(means)
b2 = v.bootstrap(toy, [1, -1], reps=6000, seed=2)
check(abs(statistics.pvariance(b2["draws"]) / closed2 - 1) < 0.08,
      "bootstrap with seeds: variance %.3f against the closed form %.3f" % (statistics.pvariance(b2["draws"]), closed2))
check(abs(statistics.mean(b2["draws"]) - statistics.mean(means)) < 0.15 and abs(b2["d"] - statistics.mean(means)) < 1e-9,
      "bootstrap with seeds: centre")

# McNemar by hand: 60 against 30 discordant images; exact two-sided p = 2 P(X <= 30), X ~ B(90, 1/2).
n01, n10, p = v.mcnemar(a_bits, b_bits)
want = 2 * sum(math.comb(90, i) for i in range(31)) / 2 ** 90
check((n01, n10) == (30, 60) and abs(p - want) < 1e-12 and 0.001 < p < 0.01, "mcnemar: %r" % ((n01, n10, p),))
check(v.mcnemar([1] * 5, [1] * 5)[2] == 1.0, "mcnemar with no discordant pair")
check(v.mcnemar([1] * 3000 + [0] * 3000, [0] * 3000 + [1] * 3000)[2] == 1.0, "mcnemar, many discordant pairs")

# sima-eval --per-image's hex: image 0 is the first digit's most significant bit; 10 images in 3 digits.
check(v.bits_from_hex("a4c", 10) == [1, 0, 1, 0, 0, 1, 0, 0, 1, 1], "bits_from_hex: %r" % v.bits_from_hex("a4c", 10))
try:
    v.bits_from_hex("a", 5)
    check(False, "a short hex record accepted")
except ValueError:
    pass

# Δerr / err: 90 -> 91 top-1 is 10 % -> 9 % error, -10 % of the error.
check(abs(v.rel_err(1.0, 90.0) + 0.1) < 1e-12, "rel_err")

finish()
