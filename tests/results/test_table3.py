#!/usr/bin/env python3
"""results/report_speed.py, claim 7's other Table 3 comparisons on a made-up record: XCA, ELU and
SOFT time over SimA's at each SimA row, the per-round ratios, the order `auto` resolves to, which
reading is like for like, and the sentence saying which claims reproduce."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import report_speed as rs  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def row(variant, order, n, c, fwd, train):
    b = {"variant": variant, "tokens": n, "dim": c, "heads": 8, "forward_ms": fwd, "train_ms": train}
    if order:
        b["order"] = order
    return b


# Shape A: N = 256, C = 64 (d = 8): auto picks kv_first. Shape B: N = 64, C = 2048 (d = 256): auto
# picks qk_first, so XCA and ELU have no like-for-like SimA row there.
bench = [row("xca", "", 256, 64, 3.0, 6.0), row("sima", "qk_first", 256, 64, 4.0, 8.0),
         row("sima", "auto", 256, 64, 2.0, 4.0), row("linear_elu", "", 256, 64, 1.0, 4.0),
         row("soft", "", 256, 64, 8.0, 4.0),
         row("xca", "", 64, 2048, 5.0, 5.0), row("sima", "qk_first", 64, 2048, 5.0, 5.0),
         row("sima", "auto", 64, 2048, 5.0, 5.0), row("soft", "", 64, 2048, 4.0, 6.0)]
# Three rounds, in bench order: every round agrees except XCA / SimA auto forward at shape A
# (round 2: 1.0 / 2.5 < 1) and SOFT / qk_first fwd+bwd at shape B.
rounds = [[[b["forward_ms"], b["train_ms"]] for b in bench] for _ in range(3)]
rounds[1][2][0] = 3.5  # SimA auto at A, forward, round 2: XCA 3.0 / 3.5 < 1
rounds[1][8][1] = 4.0  # SOFT at B, fwd+bwd, round 2: 4.0 / 5.0 < 1
rec = {"bench": bench, "round_ms": rounds}
rows = rs.others_ratios({"bench_table3": [rec]})

check([(r["n"], r["order"], r["resolved"]) for r in rows] ==
      [(256, "qk_first", "qk_first"), (256, "auto", "kv_first"), (64, "qk_first", "qk_first"),
       (64, "auto", "qk_first")], "rows and resolved orders: %r" % [(r["n"], r["order"], r["resolved"]) for r in rows])
a_auto = rows[1]["ratios"]
check(a_auto["xca"][:2] == (1.5, 1.5) and a_auto["linear_elu"][:2] == (0.5, 1.0) and a_auto["soft"][:2] == (4.0, 1.0),
      "ratios at A against auto: %r" % a_auto)
check([round(x[0], 4) for x in a_auto["xca"][2]] == [1.5, round(3.0 / 3.5, 4), 1.5], "XCA per-round: %r" % a_auto["xca"][2])
check("linear_elu" not in rows[2]["ratios"], "a variant without a row at a shape is absent")

# direction: every round above 1 / below 1 / mixed; the median alone without rounds.
check((rs.direction(1.2, [1.1, 1.3]), rs.direction(0.8, [0.7, 0.9]), rs.direction(1.2, [0.9, 1.3]),
       rs.direction(1.2, []), rs.direction(1.0, [])) == (1, -1, 0, 1, 0), "direction")

# Like for like: XCA against the kv_first row at A only (B missing); SOFT against the pinned qk_first
# row at each shape (not the auto row that also resolves to qk_first at B).
sel, missing = rs.like_for_like(rows, "xca", "kv_first")
check([r["order"] for r in sel] == ["auto"] and missing == [("bench_table3", 64, 2048, 8)], "XCA like for like: %r" % missing)
sel, missing = rs.like_for_like(rows, "soft", "qk_first")
check([(r["n"], r["order"]) for r in sel] == [(256, "qk_first"), (64, "qk_first")] and not missing, "SOFT like for like")
# SOFT / qk_first: A forward 8 / 4 faster, A fwd+bwd 4 / 8 slower, B forward 4 / 5 slower, B fwd+bwd 6 / 5
# but 4 / 5 in round 2: tied.
check(rs.tally(sel, "soft") == (1, 2, 4), "SOFT tally: %r" % (rs.tally(sel, "soft"),))

# The sentence: XCA at A (forward mixed, fwd+bwd faster): partly; ELU at A (forward slower, fwd+bwd
# 1.0 tied): does not; every word comes from the counts.
line = rs.claims_sentence(rows)[0]
check("against XCA partly reproduces (kv_first: 1 of 2 readings faster, 0 slower, 1 tied; kv_first not timed at 1 shape)"
      in line, line)
check("against ELU does not reproduce (kv_first: 0 of 2 readings faster, 1 slower, 1 tied" in line, line)
check("against SOFT partly reproduces (qk_first: 1 of 4 readings faster, 2 slower, 1 tied)" in line, line)
everything = [{**r, "ratios": {v: (2.0, 2.0, []) for v in r["ratios"]}} for r in rows]
check("against SOFT reproduces (qk_first: 4 of 4" in rs.claims_sentence(everything)[0], "all faster: reproduces")

# The section: the like-for-like cells in bold, one row per SimA row, the sentence under the table.
out = []
rs.others_section({"bench_table3": [rec]}, out)
body = [ln for ln in out if ln.startswith("| token width")]
check(len(body) == 4 and "**1.50× (0.86–1.50)**" in body[1] and "**" not in body[3].split("|")[6], "section: %r" % body)
check(any(ln.startswith("Of the paper's Table 3 claims") for ln in out), "section without its sentence")
check(rs.others_ratios({}) == [] and rs.claims_sentence([]) == [], "no record: nothing")

finish()
