"""Claim 7 of docs/RESULTS.md: the sima-bench records of the paper's Table 3 and Figure 1 shapes,
and Table 3's ratios read two ways: SimA with its product order fixed to (Q̂K̂ᵀ)V, the products
softmax does (like-for-like, as the paper's table), and SimA's `auto` order (what a user gets)."""

BENCH_ROWS = (
    ("bench_table3", "Table 3 shapes, D read as the token width C (the paper's section 2.1), ms per block, batch 8"),
    ("bench_table3_head", "Table 3 shapes, D read as the head width (C = 8 D), ms per block, batch 8"),
    ("bench_fig1_tokens", "Figure 1, time against tokens N (DeiT-S width, d = 64)"),
    ("bench_fig1_dim", "Figure 1, time against head width d (N = 197, 8 heads)"),
)
TABLE3_ROWS = ("bench_table3", "bench_table3_head")


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
    for row, title in BENCH_ROWS:
        recs = records.get(row) or []
        out.append("### %s\n" % title)
        if not recs or "bench" not in recs[0]:
            out.append("not run\n")
            continue
        bench_table(recs[0], out)
