"""The protocol and sweep sections of docs/RESULTS.md (report.py writes the rest): what every
final run is allowed to choose and on which images, then each architecture's epoch sweep on the
validation split as recorded in results/runs/sweeps/."""
import json
import os
import statistics

import fixed
import frozen_eval
import parked
import stats
import sweep
import tta
import verdicts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt_hours(secs):
    return "%.1f h" % (secs / 3600) if secs >= 3600 else "%d min" % round(secs / 60)


def protocol_section(out):
    out.append("## Protocol\n")
    out.append(
        "Every setting a run could be tuned by (epochs, learning rate, weight decay, augmentation, drop path,"
        " batch size) is chosen on a **validation split**, never on the test set:\n")
    out.append(
        "- The split: %d of the 60 000 Fashion-MNIST training images, a seeded permutation fixed by"
        " `data.validation_seed` = %d, the same for every run and every training seed (`data.validation` in"
        " [training.md](training.md)). A run on the split trains on the other %d images and evaluates the"
        " held-out ones; it never opens the test files." % (sweep.VALIDATION, sweep.VALIDATION_SEED,
                                                            60000 - sweep.VALIDATION))
    out.append(
        "- The epoch count of each architecture is chosen by a sweep on one seed (%d) of its SimA row:"
        " the epochs double until doubling them adds less than %.1f points of final validation top-1; the"
        " chosen count is the shorter of that last pair. `reproduce.py sweep` runs it. DINO's sweep"
        " (dino_xcit_sima, from 10 epochs: a DINO epoch costs several supervised ones) pretrains on the same"
        " images and scores each point by the weighted %d-NN top-1 of its teacher's frozen features on the"
        " held-out images (`sima-eval --validation`); both DINO rows take its count." % (
            sweep.SWEEP_SEED, sweep.CONVERGED, sweep.KNN_K))
    out.append(
        "- **The budget cap.** At the counts this rule reaches, the table's roughly 50 training runs do not fit"
        " the study's 40 CPU-hours: the DeiT sweep still gained more than a point per doubling at 100 epochs."
        " So a final run trains at most %s epochs (`sweep.BUDGET_CAP`); an architecture whose"
        " sweep has not converged by then is *capped*, and its sweep goes on past the cap only to show what the"
        " cap leaves (the gain column below)." % ", ".join(
            "%d (%s)" % (e, r) for r, e in sweep.BUDGET_CAP.items()))
    out.append(
        "- Claim 1 (the three architectures, with the PyTorch twin of CvT SimA) is the **final run**"
        " (`reproduce.py run`): it retrains on all 60 000 training images at its architecture's chosen or"
        " capped count and evaluates the test set **once**, after its last epoch (`train.eval_every` ="
        " epochs). The script refuses a final row whose config holds a validation split, and one whose"
        " architecture's sweep has neither converged nor reached its cap unless told `--allow-unconverged`"
        " (the record then says so).")
    out.append(
        "- Claims 2 to 5 compare ablations and attentions at one **fixed budget** of %d epochs, half the cap"
        " (`results/fixed.py`, rows `%s<row>`), each against its own controls at that budget (softmax and SimA"
        " DeiT, SimA XCiT): at the cap they would cost about twice as much again. They train on the split's %d"
        " images and evaluate the held-out ones after every epoch, which gives the time-to-accuracy table its"
        " curves, then the test set once on the last weights (with each image's correctness, `sima-eval"
        " --per-image`). Nothing is chosen from those curves. Claims 2 and 3, disputed at that budget, are"
        " measured again the same way at DeiT's converged count, %d epochs (the cap of claim 1's sweep; rows"
        " `%s<row>`, their reference rows included, 3 seeds each); a verdict at %d epochs says so."
        % (fixed.EPOCHS, fixed.PREFIX, 60000 - sweep.VALIDATION, fixed.CONVERGED_EPOCHS, fixed.CONVERGED_PREFIX,
           fixed.EPOCHS))
    out.append(
        "- A run longer than a sitting is stopped by sending SIGTERM to its launcher (`reproduce.py run` or"
        " `sweep`), which passes it to the trainers (each saves its train state mid-epoch), records their"
        " sittings and starts nothing new;"
        " `reproduce.py park` copies that state into `results/runs/parked/`, committed with the records; the"
        " next sitting, on any machine, resumes it from there bit for bit (`results/parked.py`). Its record"
        " then lists every sitting's CPU time.")
    out.append(
        "- The other settings are each config's in `configs/paper/` as they stand; they were not swept, which"
        " the discussion takes into account.")
    out.append(
        "- Statistics (`results/verdicts.py`): mean ± sample standard deviation over seeds; each effect with"
        " an interval that includes the test set's noise, a paired bootstrap over test images and seeds where"
        " every run recorded its per-image correctness, else each row's seed variance plus its binomial"
        " test-set variance (unpaired, conservative; Welch–Satterthwaite degrees of freedom, flagged below 2);"
        " Holm's correction within each claim's table. The verdict comes from that interval alone: same or"
        " opposite direction to the paper, an effect where the paper reports none, no effect (two one-sided"
        " tests within ±%.1f points), or inconclusive. The paper's ImageNet figures stand beside it, in points"
        " and as a change of error rate, and enter no verdict.\n" % verdicts.MARGIN)


def sweep_records(runs):
    """Every sweep record, in SWEEPS order."""
    return [r for row in sweep.SWEEPS for _, r in sweep.status(runs, row)[2]]


def sweep_gain(runs, row, epochs):
    """The gain of `row`'s sweep point at `epochs` over the point with half as many, as text ("+1.15"),
    or "(not yet measured)"."""
    a, b = (sweep.final_top1(sweep.load(runs, row, e)) for e in (epochs // 2, epochs))
    return stats.signed(b - a) if a is not None and b is not None else "(not yet measured)"


def knn_baselines(runs, out):
    """Under the sweep table: what each DINO point's features have to beat on the same split (the
    record's baselines, results/frozen_eval.py), by 20-NN and, where measured, by linear probe."""
    for row in sweep.SWEEPS:
        if not sweep.judged_by_knn(row):
            continue
        for e, rec in sweep.status(runs, row)[2]:
            b = rec.get("baselines", {})
            got = {f: frozen_eval.scores(b.get(f)) for f in frozen_eval.BASELINES}
            if any(got[f][0] is None for f in got):
                continue
            probe = frozen_eval.scores(rec.get("eval"))[1]
            probes = ("; linear probe %.2f against %.2f and %.2f" % (probe, got["init"][1], got["pixels"][1])
                      if probe is not None and None not in (got["init"][1], got["pixels"][1]) else "")
            out.append("%s at %d epochs: its teacher's %d-NN top-1 %.2f against %.2f for the same architecture"
                       " freshly initialised and %.2f for the raw pixels%s (same split; `%s`).\n"
                       % (row, e, sweep.KNN_K, sweep.final_top1(rec), got["init"][0], got["pixels"][0], probes,
                          b["init"]["command"]))


def sweep_section(runs, out):
    out.append("## Epoch sweeps (validation split)\n")
    out.append("Final validation top-1 (%%) of each sweep point (one seed), the best epoch's, and the gain over"
               " the point with half the epochs. DINO has no classifier: its figure is the weighted %d-NN top-1 of"
               " the teacher's frozen features after the last epoch (bank: the 50 000 training images it pretrained"
               " on; queries: the held-out ones). CPU time is user + system over the run's sittings"
               " (a sitting stopped at the end of a session counts when its launcher was stopped with SIGTERM;"
               " one whose launcher was killed outright is counted when the run resumes, from the trainer's"
               " per-epoch CPU without its start-up, and was missing before commit c637e2c; the time-to-accuracy"
               " table below gives the CPU per epoch).\n" % sweep.KNN_K)
    out.append("The models, as `configs/paper/` holds them (every row of an architecture shares its SimA row's): %s.\n"
               % "; ".join("%s: %s" % (row, sweep.describe_model(sweep.model_of(ROOT, row))) for row in sweep.SWEEPS))
    out.append("| sweep row | epochs | val top-1 (last) | best (epoch) | gain over half | CPU | status |")
    out.append("|---|---|---|---|---|---|---|")
    for row in sweep.SWEEPS:
        chosen, nxt, done = sweep.status(runs, row)
        pick, how = sweep.choice(runs, row)
        if not done:
            out.append("| %s | — | not run | | | | next: %d epochs |" % (row, nxt))
            continue
        prev = None
        for e, rec in done:
            top1 = sweep.final_top1(rec)
            if top1 is None:
                out.append("| %s | %d | failed: %s | | | %s | |" % (row, e, rec.get("error", "").replace("|", "/"),
                                                                   fmt_hours(rec["cpu_s"])))
                prev = None
                continue
            if sweep.per_epoch_validated(rec):
                best = max((x for x in rec["epochs"] if "val_top1" in x), key=lambda x: x["val_top1"])
                best_cell = "%.2f (%d)" % (best["val_top1"], best["epoch"])
            else:
                best_cell = "— (%d-NN at the end)" % sweep.KNN_K
            gain = stats.signed(top1 - prev[1]) if prev and prev[0] * 2 == e else "—"
            state = {"converged": "chosen", "capped": "capped: final runs train this count"}.get(how, "") \
                if pick == e else ""
            out.append("| %s | %d | %.2f | %s | %s | %s | %s |" % (row, e, top1, best_cell, gain,
                                                                 fmt_hours(rec["cpu_s"]), state))
            prev = (e, top1)
        if chosen is None:
            past = " (past the cap)" if nxt and nxt > sweep.BUDGET_CAP[row] else ""
            got = parked.progress(runs, "sweep_%s_e%d" % (row, nxt)) if nxt else None
            now = "; parked at %d of %d epochs" % got if got and got[1] == nxt else ""
            out.append("| %s | | | | | | %s |" % (row, "next: %d epochs%s%s" % (nxt, past, now) if nxt else
                                                "not converged at the last point"))
    out.append("")
    knn_baselines(runs, out)
    sweep_time_to_accuracy(runs, out)


def sweep_time_to_accuracy(runs, out):
    """The sweeps' table of time to 90 % and 92 % validation top-1, in CPU time."""
    out.append("Time to accuracy: the first epoch whose validation top-1 reaches 90 % and 92 %, and the CPU time"
               " to get there (that many epochs at the point's CPU per epoch; CPU time, unlike wall time, does not"
               " depend on what else the machine ran), from the longest recorded point of each sweep:\n")
    out.append("| sweep row | epochs | CPU per epoch | to 90 % | to 92 % |")
    out.append("|---|---|---|---|---|")
    for row in sweep.SWEEPS:
        latest = sweep.latest_finished(runs, row)
        if latest is None or not sweep.per_epoch_validated(latest[1]):
            continue
        e, rec = latest
        per_epoch = cpu_per_epoch(rec)
        cells = []
        for target in (90.0, 92.0):
            at = sweep.epoch_reaching(rec, target)
            cells.append("epoch %d, %s" % (at, fmt_hours(at * per_epoch)) if at is not None else "not reached")
        out.append("| %s | %d | %.0f s | %s | %s |" % (row, e, per_epoch, cells[0], cells[1]))
    out.append("")


def widths_section(runs, out):
    """The sweeps of other widths than the configs' (results/runs/sweeps/widths/): the wider models
    the configs had before the budget narrowed them, and the narrower ones tried on the way; what
    width costs and buys, for the discussion."""
    base = os.path.join(runs, "sweeps", "widths")
    if not os.path.isdir(base):
        return
    out.append("### Other widths\n")
    out.append("The same sweeps on models of other widths (records in `results/runs/sweeps/widths/`): the ones the"
               " configs held before the budget narrowed them, and narrower ones tried on the way. No final row"
               " uses them; they show what width buys in accuracy and costs in CPU (CPU per epoch as recorded,"
               " with the binary of the record's commit):\n")
    out.append("| sweep row | model | epochs | val top-1 (last) | best (epoch) | CPU per epoch | to 90 % | to 92 % |")
    out.append("|---|---|---|---|---|---|---|---|")
    for f in sorted(os.listdir(base)):
        with open(os.path.join(base, f)) as fh:
            rec = json.load(fh)
        top1 = sweep.final_top1(rec)
        if top1 is None:
            continue
        best = max(rec["epochs"], key=lambda x: x["val_top1"])
        per_epoch = cpu_per_epoch(rec)
        cells = []
        for target in (90.0, 92.0):
            at = sweep.epoch_reaching(rec, target)
            cells.append("epoch %d" % at if at is not None else "not reached")
        out.append("| %s | %s | %d | %.2f | %.2f (%d) | %.0f s | %s | %s |" % (
            rec["row"], sweep.describe_model(rec["model"]), rec["epochs_planned"], top1, best["val_top1"],
            best["epoch"], per_epoch, cells[0], cells[1]))
    out.append("")


def pre_protocol_section(runs, out):
    """The runs made before the protocol (5 epochs, the test set evaluated after every epoch), kept
    in results/runs/pre_protocol/ as they were recorded; no claim above reads them."""
    base = os.path.join(runs, "pre_protocol")
    if not os.path.isdir(base):
        return
    out.append("## Before the protocol\n")
    out.append("Runs recorded before the protocol above existed: 5 epochs (DINO 3), the test set evaluated after every"
               " epoch and no setting chosen on held-out data. They are kept in `results/runs/pre_protocol/` with"
               " their commands (the commit each names has the configs they ran); no table above uses them.\n")
    out.append("| row | seeds | test top-1 after 5 epochs | CPU per run |")
    out.append("|---|---|---|---|")
    for row in sorted(os.listdir(base)):
        recs = pre_protocol_records(runs, row)
        top = [r["top1"] for r in recs if "top1" in r]
        cell = ("%.2f ± %.2f" % (statistics.mean(top), statistics.stdev(top)) if len(top) > 1 else
                "%.2f" % top[0] if top else "see its record")
        cpu = statistics.mean(r.get("cpu_s", 0) for r in recs)
        out.append("| %s | %d | %s | %s |" % (row, len(recs), cell, fmt_hours(cpu)))
    out.append("")


def pre_protocol_records(runs, row):
    """A row's records in results/runs/pre_protocol/<row>/, in file order ([] when there are none)."""
    d = os.path.join(runs, "pre_protocol", row)
    recs = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, f)) as fh:
            recs.append(json.load(fh))
    return recs


def pre_protocol_cpu(runs, row):
    """Mean CPU seconds of a row's pre-protocol runs (all the same 5 epochs), or None."""
    cpus = [r.get("cpu_s", 0) for r in pre_protocol_records(runs, row)]
    return statistics.mean(cpus) if cpus else None


def cpu_per_epoch(rec):
    """A sweep point's CPU seconds per epoch: the trainer's own epoch_cpu_seconds where its epochs
    have them (they survive a killed sitting), else over the sittings that say how many epochs they
    ran, else over all its epochs (low when a killed sitting's CPU went unrecorded)."""
    cpus = [e["epoch_cpu_seconds"] for e in rec.get("epochs", []) if "epoch_cpu_seconds" in e]
    if cpus:
        return sum(cpus) / len(cpus)
    known = [s for s in rec.get("sittings", []) if s.get("epochs_run")]
    if known:
        return sum(s["cpu_s"] for s in known) / sum(s["epochs_run"] for s in known)
    return rec["cpu_s"] / len(rec["epochs"])


def planned_epochs(runs, srow):
    """The epochs the final rows of sweep `srow`'s architecture will train: the sweep's choice, or
    before it has one, the budget cap (the most they can take)."""
    return sweep.choice(runs, srow)[0] or sweep.BUDGET_CAP[srow]


def projected_cpu(runs, rows):
    """(CPU seconds, [rows counted], [rows left out]) the training rows would take, from each
    architecture's latest sweep point: its CPU per epoch times the row's epochs and seeds. A final row
    (claim 1, DINO) trains the planned epochs (planned_epochs) on 60 000 images, so its CPU per epoch is
    scaled up from the sweep's 50 000; a fixed-budget row (results/fixed.py) trains fixed.EPOCHS on the
    sweep's own 50 000 (fixed.epochs_of: 50, or 100 for an e100_ row), and a time-to-accuracy timing row tta.TIMING_EPOCHS there in each of its rounds
    (its "seeds") at two threads (which costs some CPU more than one thread: not counted). A row other than the sweep's own is scaled by
    its pre-protocol CPU relative to the sweep row's; a precision row (results/precision_rows.py) counts as
    the float32 row it repeats (fixed.base_row and fixed.epochs_of see through its prefix). DINO counts its pretraining only (not its k-NN and
    probe). Rows of another kind (the PyTorch twin, speed) are left out."""
    total, counted, left = 0.0, [], []
    for row, (_, _, kind, seeds) in rows.items():
        base = tta.base_row(row) if kind == "tta" else fixed.base_row(row)
        srow = sweep.sweep_row_of(base)
        latest = sweep.latest_finished(runs, srow) if srow else None
        if kind not in ("train", "fixed", "tta", "dino") or latest is None:
            left.append(row)
            continue
        epochs = {"fixed": fixed.epochs_of(row), "tta": tta.TIMING_EPOCHS}.get(kind) or planned_epochs(runs, srow)
        per_epoch = cpu_per_epoch(latest[1]) * (60000 / (60000 - sweep.VALIDATION) if kind in ("train", "dino") else 1.0)
        a, b = pre_protocol_cpu(runs, base), pre_protocol_cpu(runs, srow)
        scale = a / b if a and b else 1.0
        total += per_epoch * scale * epochs * seeds
        counted.append(row)
    return total, counted, left
