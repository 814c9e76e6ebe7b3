"""Claim 7 of docs/RESULTS.md: Table 3's ratios read two ways, SimA with its product order fixed to
(Q̂K̂ᵀ)V, the products softmax does (like-for-like, as the paper's table), and SimA's `auto` order
(what a user gets); the table's other comparisons, XCA, linear ELU and SOFT time over SimA's, each
like for like in the order whose products match (OTHERS) and with `auto`, the per-round ratios
beside each median and a sentence, computed from them, on which of those claims reproduce here; and,
on a page of its own (docs/results/speed.md, SPEED_PAGE), the sima-bench
records of the paper's Table 3 and Figure 1 shapes, every attention block."""

BENCH_ROWS = (
    ("bench_table3", "Table 3 shapes, D read as the token width C (the paper's section 2.1), ms per block, batch 8"),
    ("bench_table3_head", "Table 3 shapes, D read as the head width (C = 8 D), ms per block, batch 8"),
    ("bench_fig1_tokens", "Figure 1, time against tokens N (DeiT-S width, d = 64)"),
    ("bench_fig1_dim", "Figure 1, time against head width d (N = 197, 8 heads)"),
)
TABLE3_ROWS = ("bench_table3", "bench_table3_head")
SPEED_PAGE = "results/speed.md"  # relative to RESULTS.md's folder


def bench_table(r, out):
    out.append("`%s` (%s, load %.1f)\n" % (r["command"], r["date"], r.get("load_before", 0)))
    out.append("| N | C | heads | variant | order | forward ms | fwd+bwd ms | exp() calls | GEMM GFLOP |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for b in r["bench"]:
        if "error" in b:
            out.append("| %d | %d | %d | %s | %s | error: %s |||| " % (
                b["tokens"], b["dim"], b["heads"], b["variant"], b.get("order", ""), b["error"].replace("|", "/")))
            continue
        out.append("| %d | %d | %d | %s | %s | %.2f | %.2f | %d | %.3f |" % (
            b["tokens"], b["dim"], b["heads"], b["variant"], b.get("order", ""), b["forward_ms"], b["train_ms"],
            b["exp_calls"], b["gemm_gflop"]))
    out.append("")


def table3_ratios(records):
    """[(reading, N, C, heads, order, softmax/SimA forward, softmax/SimA fwd+bwd)] for each Table 3 shape
    and SimA order in the records (row name -> list of records)."""
    rows = []
    for row in TABLE3_ROWS:
        recs = records.get(row) or []
        if not recs or "bench" not in recs[0]:
            continue
        bench = [b for b in recs[0]["bench"] if "error" not in b]
        shapes = sorted({(b["tokens"], b["dim"], b["heads"]) for b in bench}, key=lambda s: -s[0])
        for shape in shapes:
            at = [b for b in bench if (b["tokens"], b["dim"], b["heads"]) == shape]
            soft = next((b for b in at if b["variant"] == "softmax"), None)
            if soft is None:
                continue
            for s in (b for b in at if b["variant"] == "sima"):
                rows.append((row, shape[0], shape[1], shape[2], s.get("order", ""),
                             soft["forward_ms"] / s["forward_ms"], soft["train_ms"] / s["train_ms"]))
    return rows


# Table 3's other comparisons: (bench variant, label, SimA's like-for-like order). XCA and linear ELU
# form a d×d matrix per head from the keys and values, then multiply the queries by it: the products
# of SimA's kv_first order. SOFT goes through m landmark tokens, which no SimA order does; it is read
# against qk_first, the order the softmax table pins (as the paper's table).
OTHERS = (("xca", "XCA", "kv_first"), ("linear_elu", "ELU", "kv_first"), ("soft", "SOFT", "qk_first"))


def resolved_order(b):
    """The product order a SimA bench row ran: its pinned order, or the one `auto` picks
    (the sima row's order option, nn/attention/variant_rows.cpp: qk_first iff N < d)."""
    o = b.get("order", "")
    if o != "auto":
        return o
    return "qk_first" if b["tokens"] < b["dim"] // b["heads"] else "kv_first"


def round_ratios(rec, i, j):
    """Per round, (forward, fwd+bwd) of bench row i's time over row j's; [] when the record kept no rounds."""
    return [(r[i][0] / r[j][0], r[i][1] / r[j][1]) for r in rec.get("round_ms") or []]


def others_ratios(records):
    """One dict per SimA bench row at each Table 3 shape: reading (bench row), n, c, heads, order, resolved,
    and ratios {variant: (forward, fwd+bwd, [(forward, fwd+bwd) per round])}, the variant's time over
    SimA's; a variant without a row at that shape is absent."""
    out = []
    for row in TABLE3_ROWS:
        rec = (records.get(row) or [None])[0]
        if not rec or "bench" not in rec:
            continue
        bench = [(i, b) for i, b in enumerate(rec["bench"]) if "error" not in b]
        shapes = sorted({(b["tokens"], b["dim"], b["heads"]) for _, b in bench}, key=lambda s: -s[0])
        for shape in shapes:
            at = [(i, b) for i, b in bench if (b["tokens"], b["dim"], b["heads"]) == shape]
            for j, s in (x for x in at if x[1]["variant"] == "sima"):
                ratios = {}
                for i, b in at:
                    if b["variant"] in [v for v, _, _ in OTHERS]:
                        ratios[b["variant"]] = (b["forward_ms"] / s["forward_ms"], b["train_ms"] / s["train_ms"],
                                                round_ratios(rec, i, j))
                out.append({"reading": row, "n": shape[0], "c": shape[1], "heads": shape[2], "order": s.get("order", ""),
                            "resolved": resolved_order(s), "ratios": ratios})
    return out


def direction(ratio, rounds):
    """+1 when SimA was faster (the ratio above 1) in every round, -1 when slower in every round, 0 when
    the rounds disagree; the median ratio alone when the record kept no rounds."""
    vals = rounds or [ratio]
    return 1 if min(vals) > 1 else -1 if max(vals) < 1 else 0


def like_for_like(rows, variant, order):
    """The SimA rows comparing `variant` with SimA in `order`, one per shape (the pinned order before
    `auto`), and the shapes with no SimA row in that order."""
    shapes, missing = {}, []
    for r in rows:
        key = (r["reading"], r["n"], r["c"], r["heads"])
        if r["resolved"] == order and variant in r["ratios"] and (key not in shapes or r["order"] == order):
            shapes[key] = r
    for r in rows:
        key = (r["reading"], r["n"], r["c"], r["heads"])
        if key not in shapes and key not in missing:
            missing.append(key)
    return list(shapes.values()), missing


def tally(rows, variant):
    """(faster, slower, readings) of SimA against `variant` over rows: forward and fwd+bwd of each."""
    dirs = [direction(r["ratios"][variant][k], [x[k] for x in r["ratios"][variant][2]]) for r in rows for k in (0, 1)]
    return dirs.count(1), dirs.count(-1), len(dirs)


def claim_part(label, fast, slow, n, order, missing=0):
    verdict = "reproduces" if fast == n else "does not reproduce" if fast == 0 else "partly reproduces"
    return "against %s %s (%s: %d of %d readings faster, %d slower, %d tied%s)" % (
        label, verdict, order, fast, n, slow, n - fast - slow,
        "; %s not timed at %d shape%s" % (order, missing, "s" * (missing != 1)) if missing else "")


def claims_sentence(rows):
    """The paper's Table 3 comparisons with SimA, each judged from the records like for like (and with
    `auto`): reproduced when SimA was faster at every reading (a shape's forward or fwd+bwd), not when at
    none, else partly."""
    lfl, auto = [], []
    for variant, label, order in OTHERS:
        sel, missing = like_for_like(rows, variant, order)
        if sel:
            lfl.append(claim_part(label, *tally(sel, variant), order, len(missing)))
        mine = [r for r in rows if r["order"] == "auto" and variant in r["ratios"]]
        if mine:
            auto.append(claim_part(label, *tally(mine, variant), "auto"))
    if not lfl:
        return []
    return ["Of the paper's Table 3 claims that SimA is faster, read on this CPU (a reading is one shape's forward"
            " or forward + backward; faster or slower only when every round agrees), like for like: %s. With"
            " `auto`, what a user gets: %s.\n" % ("; ".join(lfl), "; ".join(auto))]


def fmt_ratio(ratio, rounds, bold):
    s = "%.2f×" % ratio + (" (%.2f–%.2f)" % (min(rounds), max(rounds)) if rounds else "")
    return "**%s**" % s if bold else s


def others_section(records, out):
    """Table 3's XCA, ELU and SOFT against SimA, every SimA row, the like-for-like cells in bold."""
    rows = others_ratios(records)
    if not rows:
        return
    out.append("### Table 3: XCA, linear ELU and SOFT time / SimA time\n")
    out.append("Each cell: the other block's median time over SimA's, then in brackets the least and most of the"
               " ratios of the single rounds (each round times every block once). Above 1, SimA is faster. Bold"
               " cells are like for like: XCA and linear ELU form a d×d matrix per head from the keys and values"
               " and multiply the queries by it, the products of SimA's kv_first order (which `auto` picks when"
               " N ≥ d); SOFT goes through landmark tokens, which no SimA order does, so it is read against"
               " qk_first, the order pinned for softmax above (one SimA row per shape: the pinned order where"
               " `auto` picks the same).\n")
    out.append("| reading of D | N | C | d | SimA order | XCA fwd | XCA fwd+bwd | ELU fwd | ELU fwd+bwd | SOFT fwd"
               " | SOFT fwd+bwd |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    chosen = {v: [id(r) for r in like_for_like(rows, v, order)[0]] for v, _, order in OTHERS}
    for r in rows:
        order = r["order"] + ("" if r["order"] == r["resolved"] else " (%s)" % r["resolved"])
        cells = []
        for variant, _, _ in OTHERS:
            if variant not in r["ratios"]:
                cells += ["—", "—"]
                continue
            fwd, train, rounds = r["ratios"][variant]
            bold = id(r) in chosen[variant]
            cells += [fmt_ratio(fwd, [x[0] for x in rounds], bold), fmt_ratio(train, [x[1] for x in rounds], bold)]
        out.append("| %s | %d | %d | %d | %s | %s |" % ("token width" if r["reading"] == "bench_table3" else "head width",
                                                      r["n"], r["c"], r["c"] // r["heads"], order, " | ".join(cells)))
    out.append("")
    out.extend(claims_sentence(rows))


def speed_section(records, out):
    out.append("## Claim 7: speed on this CPU\n")
    ratios = table3_ratios(records)
    if ratios:
        out.append("### Table 3: softmax time / SimA time\n")
        out.append("Like-for-like is SimA with the product order fixed to (Q̂K̂ᵀ)V, the same products as softmax,"
                   " as the paper's Table 3; `auto` is the cheaper order, what a user gets. Above 1, SimA is faster.\n")
        out.append("| reading of D | N | C | heads | d | SimA order | forward | fwd+bwd |")
        out.append("|---|---|---|---|---|---|---|---|")
        for row, n, c, h, order, fwd, train in ratios:
            reading = "token width" if row == "bench_table3" else "head width"
            what = "like-for-like (%s)" % order if order == "qk_first" else order
            out.append("| %s | %d | %d | %d | %d | %s | %.2f× | %.2f× |" % (reading, n, c, h, c // h, what, fwd, train))
        out.append("")
    others_section(records, out)
    out.append("Every block's times, exp() calls and GEMM GFLOP at these shapes and at Figure 1's are on a page of"
               " their own, generated with this one: [%s](%s).\n" % (SPEED_PAGE, SPEED_PAGE))


def speed_page(records):
    """The lines of docs/results/speed.md: one table per bench row of BENCH_ROWS."""
    out = ["# Claim 7 in full: every attention block at the paper's Table 3 and Figure 1 shapes\n",
           "Generated by `python3 results/reproduce.py report` with [RESULTS.md](../RESULTS.md), whose claim 7"
           " reads Table 3's ratios to SimA from these records (`results/runs/bench_*`). Do not edit by hand.\n"]
    for row, title in BENCH_ROWS:
        recs = records.get(row) or []
        out.append("## %s\n" % title)
        if not recs or "bench" not in recs[0]:
            out.append("not run\n")
            continue
        bench_table(recs[0], out)
    out.append("## What to read next\n")
    out.append("[RESULTS.md](../RESULTS.md), claim 7 and the discussion, which read these tables; [attention_costs.md]"
               "(../attention_costs.md) for the exp() and FLOP counts behind them.\n")
    return out
