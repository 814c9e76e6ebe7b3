"""The report's sections on the training precisions (results/precision_rows.py): claim 4 under
float16, per row and seed beside the float32 rows, with the question the mixed-precision issue asks
answered from the records; and CvT SimA at bf16 against fp32, judged by equivalence (TOST)."""
import math
import re
import statistics

import fp16_headroom
import precision_rows
import report_claims
import verdicts

CURVE_EPOCHS = (1, 5, 10, 25, 50)  # the epochs of the train-loss summary
CHANCE_BOUND = 20.0  # test top-1 (%) under which a finished run did not learn: chance is 10 % on 10 classes
# (label, float32 row, float16 row) of claim 4, as the claim 4 table orders them
CLAIM4 = (("ℓ1 (SimA)", "e50_xcit_sima"), ("ℓ2", "e50_xcit_sima_l2"), ("none", "e50_xcit_sima_nonorm"))
BF16 = ("cvt_sima", precision_rows.name("bf16", "cvt_sima"))


def fp16_row(row):
    return precision_rows.name("fp16", row)


def run_command(rows, jobs=2):
    return "python3 results/reproduce.py run --rows %s --jobs %d --threads 1" % (",".join(rows), jobs)


def stopped_at(rec):
    """The epoch a failed run stopped in: the trainer's message names it ("(epoch E, batch B)"), else the
    one after its last recorded epoch."""
    m = re.search(r"\(epoch (\d+)", rec.get("error", ""))
    return int(m.group(1)) if m else len(rec.get("epochs") or []) + 1


def outcome(rec):
    """What one run came to: (state, words). state is "trained", "no learning" (finished below
    CHANCE_BOUND), "diverged" (stopped by a non-finite loss, gradient or update) or "failed"."""
    if rec.get("exit_code"):
        if rec.get("diverged"):
            return "diverged", "diverged in epoch %d (%s)" % (stopped_at(rec), rec.get("error", ""))
        return "failed", "failed: %s" % rec.get("error", "")
    if rec.get("top1") is None:
        return "failed", "no test top-1"
    if rec["top1"] < CHANCE_BOUND:
        return "no learning", "finished below %.0f %%" % CHANCE_BOUND
    return "trained", "finished"


def scaler(rec):
    """(skipped steps, final loss scale) cells of a run: the record's last logged scaler state, else its
    last epoch's; "—" for a run without a scaler (fp32, bf16)."""
    st = rec.get("loss_scaler") or next((e for e in reversed(rec.get("epochs") or []) if "loss_scale" in e), None)
    if not st:
        return "—", "—"
    at = " (step %d)" % st["step"] if rec.get("exit_code") and st.get("step") is not None else ""
    return "%d%s" % (st.get("overflow_skipped_steps", 0), at), "%g" % st["loss_scale"]


def forward_peak(rec):
    """The largest magnitude the run's forward passes rounded to float16 (records from the build that
    logs it on): from its scaler state (every logged record) else its epochs; "—" for a run without a
    scaler, "not logged" for a float16 run made before."""
    if precision_rows.record_precision(rec) != "fp16":
        return "—"
    got = []
    for key in ("fp16_forward_peak", "fp16_forward_peak_attention"):
        peaks = [e[key] for e in rec.get("epochs") or [] if e.get(key) is not None]
        if (rec.get("loss_scaler") or {}).get(key) is not None:
            peaks.append(rec["loss_scaler"][key])
        got.append(fmt_peak(max(peaks)) if peaks else None)
    if got[0] is None:
        return "not logged"
    return got[0] + (" (%s)" % got[1] if got[1] is not None else "")


def fmt_peak(x):
    return ("%.0f" if x >= 100 else "%.3g") % x


def curve(rec):
    """Train loss at CURVE_EPOCHS, "—" for an epoch the run did not reach."""
    by = {e.get("epoch"): e.get("train_loss") for e in rec.get("epochs") or []}
    return " / ".join("%.3f" % by[e] if by.get(e) is not None else "—" for e in CURVE_EPOCHS)


def seed_lines(t, label, row):
    """One table line per planned seed of `row`: recorded runs read, missing ones "not run"."""
    recs = {r.get("seed"): r for r in t.records.get(row, [])}
    prec = precision_rows.split(row)[0] or "fp32"
    lines = []
    for s in range(t.rows[row][3]):
        r = recs.get(s)
        if r is None:
            lines.append("| %s | %s | %d | not run | — | — | — | — | — |" % (label, prec, s))
            continue
        skipped, scale = scaler(r)
        top1 = "%.2f" % r["top1"] if r.get("top1") is not None else "—"
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
            label, precision_rows.record_precision(r), s, outcome(r)[1].replace("|", "/"), top1, skipped, scale,
            forward_peak(r), curve(r)))
    return lines


def tally(t, row):
    """(count of each outcome state, runs recorded, seeds planned) of a row."""
    states = [outcome(r)[0] for r in t.records.get(row, [])]
    return {k: states.count(k) for k in ("trained", "no learning", "diverged", "failed")}, len(states), t.rows[row][3]


def fp16_answer(t):
    """The issue's question, from the records: does "none" fail at float16 as the paper says (diverged,
    or finished below CHANCE_BOUND), and does l1 prevent it (every l1 seed trained)?"""
    none, l1 = fp16_row("e50_xcit_sima_nonorm"), fp16_row("e50_xcit_sima")
    (cn, nn, wn), (cl, nl, wl) = tally(t, none), tally(t, l1)
    if not nn:
        return ["The float16 rows are not run yet, so the question has no answer here. They run with `%s`."
                % run_command([r for r, _, _, _ in precision_rows.all_rows() if r.startswith("fp16_")])]
    bad = cn["diverged"] + cn["no learning"]
    so_far = ", so far (%d of %d seeds recorded)" % (nn, wn) if nn < wn else ""
    c32, n32, _ = tally(t, "e50_xcit_sima_nonorm")
    a = ("Does \"none\" fail at float16 as the paper says? %s: %d of %d seed%s diverged or did not learn%s (%s)."
         % ("Yes" if bad == nn else "In part" if bad else "No", bad, nn, "s" * (nn != 1), so_far,
            "in float32, %d of %d trained" % (c32["trained"], n32) if n32 else "float32 not run"))
    if not nl:
        return [a + " Does ℓ1 prevent it? Its float16 row is not run yet (`%s`)." % run_command([l1], 1)]
    ok = cl["trained"] == nl
    so_far = ", so far (%d of %d seeds recorded)" % (nl, wl) if nl < wl else ""
    if not bad:
        b = "ℓ1 has nothing to prevent here: \"none\" trained at float16 too (ℓ1: %d of %d seed%s trained%s)." % (
            cl["trained"], nl, "s" * (nl != 1), so_far)
    else:
        b = "Does ℓ1 prevent it? %s: %d of %d ℓ1 seed%s trained at float16%s." % (
            "Yes" if ok else "No", cl["trained"], nl, "s" * (nl != 1), so_far)
    return [a + " " + b]


def fp16_section(t, out):
    """Claim 4 under float16: every seed of the float32 and float16 rows, then the answer."""
    out.append("### Claim 4 under float16\n")
    out.append("The paper trained under CUDA float16 autocast and reports that without the ℓ1 normalisation of q and k"
               " \"none of our several trials converged\" (frequent NaN losses); the rows above trained in float32."
               " The rows `fp16_<row>` train the same recipes with `--set train.precision=fp16` (docs/precision.md:"
               " products rounded to float16 as CUDA's autocast does, a dynamic loss scaler with"
               " torch.cuda.amp.GradScaler's rules), same seeds, so seed s starts where the float32 row's seed s"
               " did. A run *diverged* when a non-finite loss, gradient or update stopped it (the trainer's"
               " default, `train.on_nonfinite: stop`; its error is in the record), and *did not learn* when it"
               " finished below %.0f %% test top-1. *Skipped* counts the steps the loss scaler skipped for an"
               " overflowed gradient (each halves the scale), with the scale at the last logged step. *Forward peak*"
               " is the largest magnitude any value of a training forward pass had where it was rounded to float16"
               " (the products' inputs and outputs; `fp16_forward_peak` in the metrics), over the whole run, and in"
               " brackets the same over the attention cores' products (`fp16_forward_peak_attention`): float16"
               " overflows from 65520, and the loss scaler guards only the backward, so a forward that reached it"
               " would give an infinite loss (runs made before the trainer logged it say \"not logged\"). Train loss"
               " at epochs %s.\n" % (CHANCE_BOUND, ", ".join(map(str, CURVE_EPOCHS))))
    out.append("| normalisation | precision | seed | outcome | test top-1 | skipped | final loss scale | forward peak"
               " | train loss (epoch %s) |" % " / ".join(map(str, CURVE_EPOCHS)))
    out.append("|---|---|---|---|---|---|---|---|---|")
    for label, row in CLAIM4:
        out.extend(seed_lines(t, label, row))
        out.extend(seed_lines(t, label, fp16_row(row)))
    out.append("")
    out.extend(fp16_answer(t))
    out.append("\nOne row end to end (its seeds in turn, then the test set once each, records in"
               " `results/runs/<row>/`): `%s`.\n" % run_command([fp16_row("e50_xcit_sima_nonorm")], 1))
    headroom_section(out)


def headroom_section(out, records=None):
    """How close the forward starts to float16's limit, at this study's scale and the paper's."""
    recs = fp16_headroom.load(records)
    out.append("**How close the forward starts to float16's limit** (`python3 results/fp16_headroom.py run`). The"
               " forward peak (as in the table above) of the first %d steps at fp16 of each config, batch %d,"
               " one thread: the weights are the initial ones (the warm-up's first learning rates are about"
               " 1e-6). In brackets, the attention cores' part of it; then float16's headroom, 65504 over the"
               " peak. The paper's scale is XCiT-S12/16"
               " on Fashion-MNIST resized to 224 pixels; nothing else differs from claim 4's configs.\n"
               % (fp16_headroom.STEPS, fp16_headroom.BATCH))
    if not recs:
        out.append("Not run yet: `python3 results/fp16_headroom.py run`.\n")
        return
    out.extend(fp16_headroom.table(recs))
    cpu = sum(r.get("cpu_s", 0) for r in recs.values())
    out.append("\n%d probes recorded, %.0f CPU seconds in all (`results/runs/fp16_headroom/`).\n" % (len(recs), cpu))


def bf16_section(t, out):
    """CvT SimA at bf16 against fp32: bf16 - fp32 with its interval, matched when TOST says so."""
    fp32, bf16 = BF16
    out.append("### The same CvT SimA trained at bf16\n")
    out.append("Row `%s` trains `%s`'s recipe (claim 1: its sweep's epochs, all 60 000 training images, the test set"
               " once at the end, the same seeds) with `--set train.precision=bf16` (docs/precision.md; it needs a CPU"
               " with AVX512-BF16 or AMX-BF16). bf16 matches fp32 when two one-sided tests put bf16 − fp32 within"
               " ±%.1f points (equivalence, a family of one); an interval that merely holds 0 is not a match.\n"
               % (bf16, fp32, verdicts.MARGIN))
    out.append("| precision | top-1 | Δ bf16 − fp32 [95 % CI] | verdict | uncertainty | wall per run | CPU ratio (bf16 / fp32) |")
    out.append("|---|---|---|---|---|---|---|")
    j = report_claims.judge_family(t, [([(bf16, 1), (fp32, -1)], None)])[0]
    v, form = bf16_verdict(t, j)
    out.append("| fp32 | %s | | | | %s | |" % (t.cell(fp32), t.walls(fp32)))
    out.append("| bf16 | %s | %s | %s | %s | %s | %s |" % (t.cell(bf16), report_claims.fmt_interval(j), v, form,
                                                          t.walls(bf16), t.cpu_ratio(bf16, fp32)))
    out.append("")
    out.extend(hosts_note(t))
    out.extend(unpaired_note(t, j))
    if not t.records.get(bf16):
        out.append("Not run yet: `%s`.\n" % run_command([bf16], 1))


def hosts(recs):
    """The CPUs a row's runs trained on: each record's sittings' (runner.py), else the record's own."""
    return sorted({s.get("cpu") or r.get("cpu") or "unknown CPU" for r in recs for s in (r.get("sittings") or [r])})


def hosts_note(t):
    """When the two rows trained on different CPUs, the CPU ratio compares the hosts as well as the
    precisions: the line names each row's CPUs (docs/precision.md times both precisions on one host)."""
    fp32, bf16 = BF16
    a, b = hosts(t.records.get(fp32, [])), hosts(t.records.get(bf16, []))
    if not a or not b or a == b:
        return []
    return ["The CPU ratio compares hosts as well as precisions: `%s` trained on %s, `%s` on %s (docs/precision.md"
            " times both precisions on one machine).\n" % (fp32, " and ".join(a), bf16, " and ".join(b))]


def unpaired_note(t, j):
    """Under the analytic (unpaired) form, the test set's binomial term alone, from the fp32 row's mean
    top-1: when its 95 % half-width passes the margin, TOST cannot show equivalence, and the line says
    what would make the interval paired."""
    fp32, bf16 = BF16
    vals = [r["top1"] for r in t.records.get(fp32, []) if r.get("top1") is not None]
    if not vals or (j is not None and j["form"] != "analytic"):
        return []
    p = statistics.mean(vals) / 100
    half = 1.96 * math.sqrt(2 * p * (1 - p) / verdicts.N_TEST) * 100
    if half <= verdicts.MARGIN:
        return []
    return ["Without per-image records on both rows the interval is the analytic, unpaired form, and its test-set"
            " term alone (two models at %s's %.2f %% on %s images) is ±%.2f points at 95 %%, wider than the ±%.1f"
            " margin: equivalence cannot be shown that way. `%s` records each test image's correctness"
            " (`sima-eval --per-image`, the records' `correct_hex`); the fp32 records of claim 1 keep none, and"
            " their checkpoints are gone, so the paired bootstrap needs `%s`'s runs trained again:"
            " `python3 results/rederive.py run --rows %s` attaches each run's per-image record when the retrained"
            " model reproduces its recorded top-1.%s\n"
            % (fp32, 100 * p, "{:,}".format(verdicts.N_TEST).replace(",", " "), half, verdicts.MARGIN, bf16, fp32, fp32,
               attempts_said(t, fp32))]


def attempts_said(t, row):
    """What the records say of the rederive attempts on `row` that attached nothing (results/rederive.py)."""
    tried = [(r.get("seed"), a) for r in t.records.get(row, []) for a in r.get("per_image_attempts") or []]
    return "".join(" Tried on seed %s (%s, %s, %s CPU s): %s." % (s, a.get("cpu"), a.get("date"), a.get("cpu_s"),
                                                                   a.get("result")) for s, a in tried)


def bf16_verdict(t, j):
    """(verdict, uncertainty) cells: "matches fp32" when TOST shows equivalence, else why not."""
    fp32, bf16 = BF16
    v, form = report_claims.verdict_cell(t, j, BF16)
    if j is None:
        return v, form
    so_far = ", so far" if any(t.partial(r) for r in (fp32, bf16)) else ""
    if j["verdict"].startswith("no effect"):
        return "matches fp32: equivalent within ±%.1f (TOST p %.3g)%s" % (verdicts.MARGIN, j["p_tost"], so_far), form
    if j["verdict"] == "inconclusive":
        return "equivalence not shown (TOST p %.2f)%s" % (j["p_tost"], so_far), form
    return v, form
