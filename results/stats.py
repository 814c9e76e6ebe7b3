"""The statistics of docs/RESULTS.md: Student's t, and a contrast of means with its Welch
confidence interval (unequal variances, Welch–Satterthwaite degrees of freedom) over seeds only.
The verdicts, with intervals that include the test set, are results/verdicts.py's.

Student's t quantile from its CDF, F(t) = 1 - I_x(df/2, 1/2) / 2 for t > 0 with x = df / (df + t^2),
I the regularised incomplete beta function (its continued fraction, Abramowitz & Stegun 26.5.8),
inverted by bisection; no SciPy needed. Checked in tests/results/test_stats.py against the
textbook table (t_0.975 = 12.706 at 1 df, 4.303 at 2, 2.776 at 4, 2.228 at 10, 1.960 at infinity).
"""
import math
import statistics


def _betacf(a, b, x):
    """The continued fraction of I_x(a, b) (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    p = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - p if t > 0 else p


def t_quantile(q, df):
    """The q-quantile (0.5 < q < 1) of Student's t with df > 0 degrees of freedom (fractional allowed)."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def contrast(groups, weights, level=0.95):
    """sum_i weights[i] * mean(groups[i]) with its Welch-Satterthwaite confidence interval: each mean
    contributes weights[i]^2 var_i / n_i to the variance, and the degrees of freedom are Satterthwaite's
    (Welch's interval is the case of two groups and weights +1, -1). A dict of d, se, df, lo, hi and ns
    (the groups' sizes); lo = hi = None when a group has fewer than 2 values or no group has spread."""
    d = sum(w * statistics.mean(g) for g, w in zip(groups, weights))
    out = {"d": d, "se": None, "df": None, "lo": None, "hi": None, "ns": [len(g) for g in groups]}
    if min(out["ns"]) < 2:
        return out
    v = [w * w * statistics.variance(g) / len(g) for g, w in zip(groups, weights)]
    se = math.sqrt(sum(v))
    if se == 0.0:
        return out
    df = sum(v) ** 2 / sum(x * x / (len(g) - 1) for x, g in zip(v, groups))
    h = t_quantile(0.5 + level / 2.0, df) * se
    out.update(se=se, df=df, lo=d - h, hi=d + h)
    return out


def welch(a, b, level=0.95):
    """mean(a) - mean(b) with its Welch confidence interval (contrast's dict)."""
    return contrast([a, b], [1, -1], level)


def signed(x, digits=2):
    """x with its sign always shown, negative with the typographic minus U+2212 as in the prose ("−0.12")."""
    return ("%+.*f" % (digits, x)).replace("-", "\u2212")


def fmt_welch(w):
    if w["lo"] is None:
        return signed(w["d"])
    return "%s [%s, %s]" % (signed(w["d"]), signed(w["lo"]), signed(w["hi"]))
