"""The verdict rule of docs/RESULTS.md: what this study's own interval says about a claimed effect.

An effect is a contrast of rows' mean test top-1 (points): SimA minus its baseline, or a difference
of two such differences. Its uncertainty includes the test set's own noise, not only the seeds':

- **paired bootstrap** (`bootstrap`), when every run of every row in the contrast recorded which
  test images it got right (`correct_hex`, sima-eval --per-image): each replicate resamples, within
  each row, its seeds with replacement, and the test images with replacement (the same images for
  every run, so the pairing is kept; that step drawn from its normal limit with its exact mean and
  variance, see `bootstrap`); the interval is the replicates' percentiles. Resampling n
  seeds understates their spread by (n - 1) / n in variance, so a row of 2 seeds is flagged, and a
  row of one seed gives no interval.
- **analytic, unpaired** (`analytic`), otherwise: each row's seed variance over its seeds (s^2 / n),
  plus each row's binomial test-set variance p (1 - p) / N of a model with accuracy p on N images,
  as if the rows' errors on the test images were independent. Models trained on the same images
  mostly fail on the same test images, so this overstates the variance of a difference: it is the
  conservative form. Degrees of freedom are Welch-Satterthwaite's with the binomial terms as known
  (infinite degrees of freedom); an interval whose df are below 2 is flagged.

The verdict (`judge`) comes from the interval alone, never from a figure measured on another data set:

- *same direction*: the effect differs from 0 on the paper's side (two-sided test, Holm-adjusted);
- *opposite direction*: it differs from 0 on the other side;
- *an effect (positive / negative)*: it differs from 0 where the paper reports none or no figure;
- *no effect*: two one-sided tests (TOST) put it inside the equivalence margin, +/- MARGIN points;
- *inconclusive*: neither.

Holm's step-down correction applies within a claim's family of comparisons (each claim's table),
to the two-sided tests and to the TOSTs separately; the interval shown is at the level Holm's step
gives that comparison (1 - alpha / (m - k + 1) for the k-th smallest p of m), so that it excludes 0
exactly when the comparison's own step rejects. McNemar's exact test (`mcnemar`) compares two single
runs image by image.
"""
import collections
import math
import random
import statistics

import stats

ALPHA = 0.05
MARGIN = 0.3  # points of top-1: the equivalence margin of "no effect"
N_TEST = 10000  # Fashion-MNIST's test images
REPS = 2000  # bootstrap replicates


def bits_from_hex(h, n):
    """sima-eval --per-image's correct_hex: image i right (1) or wrong (0) as bit i, four a hex digit,
    most significant bit first; the first n bits."""
    bits = []
    for ch in h:
        v = int(ch, 16)
        bits.extend((v >> s) & 1 for s in (3, 2, 1, 0))
    if len(bits) < n:
        raise ValueError("correct_hex holds %d bits, not %d" % (len(bits), n))
    return bits[:n]


def analytic(groups, weights, n_test=N_TEST):
    """sum_i w_i mean(groups[i]) (groups: each row's top-1 per seed, in points) with the variance of
    the unpaired form: sum_i w_i^2 (s_i^2 / n_i + p_i (1 - p_i) / N) in points^2. A dict of d, se, df
    (Satterthwaite, the binomial terms counting as known), ns, form; se None when a row has < 2 seeds."""
    d = sum(w * statistics.mean(g) for g, w in zip(groups, weights))
    out = {"d": d, "se": None, "df": None, "ns": [len(g) for g in groups], "form": "analytic"}
    if min(out["ns"]) < 2:
        return out
    seed = [w * w * statistics.variance(g) / len(g) for g, w in zip(groups, weights)]
    binom = [w * w * (statistics.mean(g) / 100) * (1 - statistics.mean(g) / 100) / n_test * 1e4
             for g, w in zip(groups, weights)]
    var = sum(seed) + sum(binom)
    den = sum(v * v / (len(g) - 1) for v, g in zip(seed, groups))
    out.update(se=math.sqrt(var), df=(var * var / den) if den > 0 else math.inf)
    return out


def bootstrap(runs, weights, reps=REPS, seed=0, paired_seeds=False):
    """The paired bootstrap: runs[i] is row i's per-seed lists of 0/1 per test image (every list the
    same images in the same order). A dict of d, draws (sorted replicates of the contrast), ns, form.

    A replicate resamples each row's seeds with replacement, which gives each run r a weight a_r (its
    row's weight times how often it was drawn over the row's seed count), then resamples the N test
    images, the same images for every run. Given the a_r, the contrast over a resample of the images
    is the mean of N draws of x_i = sum_r a_r bit_ir; it is drawn from its normal limit with its exact
    mean sum_r a_r acc_r and variance (a^T Q a - (sum_r a_r acc_r)^2) / N, Q_rs the share of images
    both r and s got right (in points^2): exact in its first two moments, and cheap enough to run
    every time the report is made.

    paired_seeds: the rows' runs are paired by seed (run j of every row started from the same
    weights and batches, e.g. one recipe at two precisions): a replicate draws seed indices once for
    all rows, so the seed-to-seed spread the rows share cancels in the contrast."""
    flat = [bits for row in runs for bits in row]
    n = len(flat[0])
    if any(len(b) != n for b in flat):
        raise ValueError("the runs' per-image records cover different numbers of images")
    acc = [100.0 * sum(b) / n for b in flat]
    # The statistic depends on an image only through its pattern of right and wrong over the runs.
    patterns = collections.Counter(zip(*flat))
    R = len(flat)
    Q = [[0.0] * R for _ in range(R)]
    for pat, c in patterns.items():
        on = [r for r in range(R) if pat[r]]
        for r in on:
            for s in on:
                Q[r][s] += c
    Q = [[1e4 * q / n for q in row] for row in Q]
    starts, j = [], 0
    for row in runs:
        starts.append(j)
        j += len(row)
    d = sum(w * statistics.mean(acc[st:st + len(row)]) for row, w, st in zip(runs, weights, starts))
    rng = random.Random(seed)
    draws = []
    for _ in range(reps):
        a = [0.0] * R
        if paired_seeds:
            for j in [rng.randrange(len(runs[0])) for _ in runs[0]]:
                for row, w, st in zip(runs, weights, starts):
                    a[st + j] += w / len(row)
        else:
            for row, w, st in zip(runs, weights, starts):
                for _ in row:
                    a[st + rng.randrange(len(row))] += w / len(row)
        mean = sum(x * y for x, y in zip(a, acc))
        var = sum(a[r] * a[s] * Q[r][s] for r in range(R) if a[r] for s in range(R) if a[s]) - mean * mean
        draws.append(rng.gauss(mean, math.sqrt(max(var, 0.0) / n)))
    draws.sort()
    return {"d": d, "draws": draws, "ns": [len(r) for r in runs], "form": "paired bootstrap", "df": None,
            "seeds_paired": paired_seeds}


def estimate(rows, weights, n_test=N_TEST):
    """The contrast of rows (each a list of (top1, bits or None) per seed): the paired bootstrap when
    every run has its per-image record and every row 2 seeds or more, the analytic form otherwise (which
    gives no interval for a row of one seed: its seed spread is unknown)."""
    if all(bits is not None for row in rows for _, bits in row) and min(len(r) for r in rows) >= 2:
        return bootstrap([[bits for _, bits in row] for row in rows], weights)
    return analytic([[top1 for top1, _ in row] for row in rows], weights, n_test)


def p_values(e, margin=MARGIN):
    """(two-sided p of effect = 0, TOST p of |effect| >= margin), or (None, None) without spread."""
    if e["form"] == "paired bootstrap":
        b = e["draws"]
        frac = lambda k: (k + 1) / (len(b) + 1)  # noqa: E731
        two = min(1.0, 2 * frac(min(sum(x <= 0 for x in b), sum(x >= 0 for x in b))))
        return two, max(frac(sum(x <= -margin for x in b)), frac(sum(x >= margin for x in b)))
    if not e["se"]:
        return None, None
    cdf = (lambda t: 0.5 * (1 + math.erf(t / math.sqrt(2)))) if math.isinf(e["df"]) else \
        (lambda t: stats.t_cdf(t, e["df"]))
    two = 2 * (1 - cdf(abs(e["d"]) / e["se"]))
    return two, max(1 - cdf((e["d"] + margin) / e["se"]), cdf((e["d"] - margin) / e["se"]))


def interval(e, level):
    """The effect's interval at `level` (e.g. 0.95), or (None, None)."""
    if e["form"] == "paired bootstrap":
        b = e["draws"]
        lo_i = int(math.floor((1 - level) / 2 * (len(b) - 1)))
        return b[lo_i], b[len(b) - 1 - lo_i]
    if not e["se"]:
        return None, None
    q = 0.5 + level / 2
    h = (statistics.NormalDist().inv_cdf(q) if math.isinf(e["df"]) else stats.t_quantile(q, e["df"])) * e["se"]
    return e["d"] - h, e["d"] + h


def holm(ps):
    """Holm's step-down adjusted p-values (None stays None, and does not count in the family)."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    m, out, run = len(idx), [None] * len(ps), 0.0
    for k, i in enumerate(idx):
        run = max(run, min(1.0, (m - k) * ps[i]))
        out[i] = run
    return out


def holm_levels(ps, alpha=ALPHA):
    """Each comparison's interval level under Holm: 1 - alpha / (m - k + 1) for the k-th smallest p."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    out = [None] * len(ps)
    for k, i in enumerate(idx):
        out[i] = 1 - alpha / (len(idx) - k)
    return out


def judge(family, margin=MARGIN, alpha=ALPHA):
    """family: [(estimate, paper effect or None)], one claim's comparisons. Returns per comparison a
    dict: verdict, lo, hi, level, p, p_tost (Holm-adjusted), flag (df < 2), form, d."""
    raw = [p_values(e, margin) for e, _ in family]
    p2, pt = holm([r[0] for r in raw]), holm([r[1] for r in raw])
    levels = holm_levels([r[0] for r in raw], alpha)
    out = []
    for (e, paper), a, b, lev in zip(family, p2, pt, levels):
        j = {"d": e["d"], "form": e["form"], "p": a, "p_tost": b, "level": lev, "lo": None, "hi": None,
             "flag": "", "family": len([r for r in raw if r[0] is not None])}
        if a is None:
            j["verdict"] = "no interval (n = %s)" % ", ".join(map(str, e["ns"]))
            out.append(j)
            continue
        j["lo"], j["hi"] = interval(e, lev)
        if e.get("df") is not None and e["df"] < 2:
            j["flag"] = "df %.1f < 2: the interval's coverage is poor" % e["df"]
        elif e["form"] == "paired bootstrap" and min(e["ns"]) < 3:
            j["flag"] = "%d seeds: resampling them understates their spread" % min(e["ns"])
        if a < alpha:
            sign = 1 if e["d"] > 0 else -1
            if paper:
                j["verdict"] = "same direction" if sign * paper > 0 else "opposite direction"
            else:
                j["verdict"] = "an effect (%s)" % ("positive" if sign > 0 else "negative")
        elif b < alpha:
            j["verdict"] = "no effect (within ±%.1f)" % margin
        else:
            j["verdict"] = "inconclusive"
        out.append(j)
    return out


def mcnemar(a, b):
    """McNemar's exact test of two runs on the same images: (n01, n10, two-sided p), n01 the images
    only b got right and n10 those only a got right; p from the binomial(n01 + n10, 1/2)."""
    n10 = sum(1 for x, y in zip(a, b) if x and not y)
    n01 = sum(1 for x, y in zip(a, b) if y and not x)
    n, k = n01 + n10, min(n01, n10)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / (1 << n) if n else 1.0  # exact integers, then one division
    return n01, n10, min(1.0, 2 * tail)


def rel_err(d, base_top1):
    """An effect as a change of error rate, Δerr / err: (err_new - err_base) / err_base, err = 100 - top-1."""
    return -d / (100.0 - base_top1)
