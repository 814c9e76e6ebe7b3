#!/usr/bin/env python3
"""The protocol of docs/RESULTS.md as results/reproduce.py enforces it, on made-up sweep records:
which epoch count a sweep chooses, what a final run is given, and what it refuses."""
import json
import statistics
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results"))
import reproduce  # noqa: E402
import report  # noqa: E402
import stats  # noqa: E402
import sweep  # noqa: E402

from checks import check, finish  # noqa: E402  (tests/results/checks.py)


def record(runs, row, epochs, top1s):
    rec = {"exit_code": 0, "cpu_s": 1.0,
           "epochs": [{"epoch": i + 1, "val_top1": t, "epoch_seconds": 10.0} for i, t in enumerate(top1s)]}
    reproduce.write_json(sweep.record_path(runs, row, epochs), rec)


def refused(fn):
    try:
        fn()
    except SystemExit as e:
        return str(e)
    return ""


with tempfile.TemporaryDirectory() as d:
    reproduce.RUNS = d
    cfg = os.path.join(reproduce.ROOT, "configs", "paper", "cvt_sima.json")
    # No sweep point: a final row is refused, naming the sweep to run.
    msg = refused(lambda: reproduce.final_plan("cvt_softmax", cfg))
    check("the cvt_sima sweep has neither converged nor reached its budget cap of 100 epochs (next point: 25 epochs)"
          in msg, "no sweep: " + msg)
    # 25 -> 50 gains 1.0 point: not converged; --allow-unconverged takes the longest point.
    record(d, "cvt_sima", 25, [85.0, 90.0])
    record(d, "cvt_sima", 50, [85.0, 91.0])
    check(sweep.status(d, "cvt_sima")[:2] == (None, 100), "status after 25, 50: %r" % (sweep.status(d, "cvt_sima")[:2],))
    check("next point: 100 epochs" in refused(lambda: reproduce.final_plan("cvt_sima", cfg)), "unconverged refused")
    reproduce.ALLOW_UNCONVERGED = True
    plan = reproduce.final_plan("cvt_sima", cfg)
    check(plan["epochs"] == 50 and plan["sets"] == ["--set", "train.epochs=50", "--set", "train.eval_every=50"],
          "allowed unconverged: %r" % plan)
    check("not converged" in plan["from"], plan["from"])
    reproduce.ALLOW_UNCONVERGED = False
    # 50 -> 100 gains 0.6: not converged, but 100 is the budget cap: the final runs take 100 epochs
    # (the sweep itself goes on to 200, to show what the cap leaves).
    record(d, "cvt_sima", 100, [85.0, 91.6])
    check(sweep.status(d, "cvt_sima")[:2] == (None, 200), "past the cap, the sweep goes on")
    check(sweep.choice(d, "cvt_sima") == (100, "capped"), "capped: %r" % (sweep.choice(d, "cvt_sima"),))
    plan = reproduce.final_plan("cvt_softmax", os.path.join(reproduce.ROOT, "configs", "paper", "cvt_softmax.json"))
    check(plan["epochs"] == 100 and "budget cap" in plan["from"], "capped plan: %r" % plan)
    # A 200-epoch point gaining < 0.3 would converge at 100 by the rule: within the cap, "converged".
    record(d, "cvt_sima", 200, [85.0, 91.8])
    check(sweep.choice(d, "cvt_sima") == (100, "converged"), "converged at the cap")
    # 50 -> 100 gains 0.2 < 0.3: converged at 50, for every cvt row; the test set once, at the end.
    os.remove(sweep.record_path(d, "cvt_sima", 200))
    record(d, "cvt_sima", 100, [85.0, 91.2])
    check(sweep.status(d, "cvt_sima")[:2] == (50, None), "converged at 50")
    plan = reproduce.final_plan("cvt_softmax", os.path.join(reproduce.ROOT, "configs", "paper", "cvt_softmax.json"))
    check(plan["epochs"] == 50 and "train.eval_every=50" in plan["sets"], "converged plan: %r" % plan)
    # The PyTorch twin of cvt_sima takes the cvt sweep's epochs too.
    check(reproduce.final_plan("torch_twin_cvt_sima", cfg)["epochs"] == 50, "twin plan")
    # Time to accuracy: the first epoch at or above the target.
    check(sweep.epoch_reaching(sweep.load(d, "cvt_sima", 100), 90.0) == 2, "epoch reaching 90")
    check(sweep.epoch_reaching(sweep.load(d, "cvt_sima", 100), 92.0) is None, "92 never reached")
    # A final config holding a validation split is refused.
    bad = os.path.join(d, "bad.json")
    with open(cfg) as f:
        c = json.load(f)
    c["data"]["validation"] = 10000
    with open(bad, "w") as f:
        json.dump(c, f)
    check("sets data.validation" in refused(lambda: reproduce.final_plan("cvt_sima", bad)), "validation in final config")
    # DINO rows take DINO's own sweep, judged by the 20-NN of the teacher's features (the record's
    # top-level val_top1; its epochs have no validation top-1): 10 -> 20 gains 0.25 < 0.3, converged at 10.
    dcfg = os.path.join(reproduce.ROOT, "configs", "paper", "dino_xcit_xca.json")
    check("the dino_xcit_sima sweep has neither converged nor reached its budget cap of 20 epochs (next point: 10 epochs)" in
          refused(lambda: reproduce.final_plan("dino_xcit_xca", dcfg)), "dino refused before its sweep")
    for e, knn in ((10, 86.0), (20, 86.25)):
        reproduce.write_json(sweep.record_path(d, "dino_xcit_sima", e),
                             {"exit_code": 0, "cpu_s": 1.0, "val_top1": knn, "epochs": [{"epoch": e, "loss": 1.0}]})
    check(sweep.final_top1(sweep.load(d, "dino_xcit_sima", 20)) == 86.25, "dino point's top-1")
    check(sweep.status(d, "dino_xcit_sima")[:2] == (10, None), "dino sweep: %r" % (sweep.status(d, "dino_xcit_sima")[:2],))
    p = reproduce.final_plan("dino_xcit_xca", dcfg)
    check(p["epochs"] == 10 and "converged" in p["from"], "dino plan: %r" % p)
    # A point whose k-NN failed has no top-1, and the report's sweep table still renders every point.
    reproduce.write_json(sweep.record_path(d, "dino_xcit_sima", 40),
                         {"exit_code": 1, "cpu_s": 1.0, "error": "k-NN evaluation failed", "epochs": []})
    check(sweep.final_top1(sweep.load(d, "dino_xcit_sima", 40)) is None, "failed dino point")
    import report_protocol  # noqa: E402
    out = []
    report_protocol.sweep_section(d, out)
    check("| dino_xcit_sima | 20 | 86.25 | — (20-NN at the end) | +0.25 | " in "\n".join(out), "dino sweep rows: %r" % out)
    # Every row's architecture maps to the sweep that chooses its epochs.
    for row, _, kind, _ in reproduce.ROWS:
        if kind in ("train", "torch"):
            check(sweep.sweep_row_of(row) in sweep.SWEEPS, "%s has no sweep" % row)

# The fixed budgets (results/fixed.py): a row's prefix names its epochs and its config.
import fixed  # noqa: E402
check(fixed.epochs_of("e100_deit_sima_1head") == 100 and fixed.base_row("e100_deit_sima_1head") == "deit_sima_1head"
      and fixed.epochs_of("e50_deit_sima") == 50 and fixed.epochs_of("deit_sima") is None
      and fixed.base_row("deit_sima") == "deit_sima", "fixed budgets' prefixes")
check(fixed.CONVERGED_EPOCHS == sweep.BUDGET_CAP["deit_sima"], "claims 2 and 3 at DeiT's cap")
e100 = [r for r, _, kind, seeds in reproduce.ROWS if r.startswith("e100_") and kind == "fixed" and seeds >= 3]
check(len(e100) == 6 and all(os.path.exists(reproduce.config_path(r)) for r in e100), "e100 rows: %r" % e100)

# The projected CPU of the final rows: the sweep's CPU per epoch scaled to 60 000 images, times its
# epochs (a lower bound before convergence) and the seeds; other rows scaled by their pre-protocol CPU.
import report_protocol  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    rec = {"exit_code": 0, "cpu_s": 2500.0, "epochs": [{"epoch": i + 1, "val_top1": 80.0 + i} for i in range(25)]}
    reproduce.write_json(sweep.record_path(d, "cvt_sima", 25), rec)
    for row, cpu in (("cvt_sima", 500.0), ("cvt_softmax", 1000.0)):
        reproduce.write_json(os.path.join(d, "pre_protocol", row, "s0.json"), {"cpu_s": cpu})
    # DINO's pretraining at its sweep's CPU per epoch, scaled to 60 000 images, one seed: 80 s x 1.2 x 10.
    reproduce.write_json(sweep.record_path(d, "dino_xcit_sima", 10),
                         {"exit_code": 0, "cpu_s": 900.0, "val_top1": 85.0,
                          "epochs": [{"epoch": i + 1, "epoch_cpu_seconds": 80.0} for i in range(10)]})
    rows = {"cvt_sima": ("cvt_sima", [1], "train", 3), "cvt_softmax": ("cvt_softmax", [1], "train", 3),
            "dino_xcit_sima": ("dino_xcit_sima", [6], "dino", 1), "deit_sima": ("deit_sima", [1], "train", 3),
            "tta_cvt_softmax": ("tta_cvt_softmax", ["tta"], "tta", 1),
            "e50_cvt_softmax": ("e50_cvt_softmax", [2], "fixed", 2),
            "e100_cvt_softmax": ("e100_cvt_softmax", [2], "fixed", 1)}
    total, counted, left = report_protocol.projected_cpu(d, rows)
    # Final rows: 60 000 images (x1.2) for the budget cap's epochs (100; DINO 20) while no sweep has
    # chosen; a fixed-budget row: 50 000 images (not scaled), fixed.EPOCHS, its base row's pre-protocol
    # ratio (2), two seeds (an e100_ row: 100 epochs, one seed); a time-to-accuracy timing row:
    # tta.TIMING_EPOCHS epochs on 50 000, one run.
    import fixed, tta  # noqa: E401,E402
    want = (120 * 100 * 3 + 240 * 100 * 3 + 96 * 20 + 200 * fixed.EPOCHS * 2 + 200 * 100 * 1
            + 200 * tta.TIMING_EPOCHS)
    check(abs(total - want) < 1e-6, "projected CPU %r, want %r" % (total, want))
    # A killed first sitting left no CPU; the sitting that finished ran 10 epochs for 1500 s: 150 s each.
    rec["sittings"] = [{"cpu_s": 2500.0, "resumed": True, "epochs_run": 10}]
    rec["cpu_s"] = 1500.0
    rec["sittings"][0]["cpu_s"] = 1500.0
    check(report_protocol.cpu_per_epoch(rec) == 150.0, "CPU per epoch over known sittings")
    # The trainer's own per-epoch CPU, where the epochs carry it, comes first.
    rec["epochs"][3]["epoch_cpu_seconds"], rec["epochs"][4]["epoch_cpu_seconds"] = 90.0, 110.0
    check(report_protocol.cpu_per_epoch(rec) == 100.0, "CPU per epoch from the epochs' own figures")
    check(counted == ["cvt_sima", "cvt_softmax", "dino_xcit_sima", "tta_cvt_softmax", "e50_cvt_softmax",
                      "e100_cvt_softmax"]
          and left == ["deit_sima"],
          "%r %r" % (counted, left))

# Speed rows over several rounds: each row's times are the medians over the rounds, and the ratios
# of claim 7 are read from those medians, like-for-like (qk_first) and auto apart.
import report_speed  # noqa: E402
def bench_row(variant, order, fwd, train):
    b = {"variant": variant, "tokens": 64, "dim": 256, "heads": 8, "forward_ms": fwd, "train_ms": train,
         "exp_calls": 0, "gemm_gflop": 0.3}
    if order:
        b["order"] = order
    return b
rounds = [[bench_row("softmax", "", 4.0, 10.0), bench_row("sima", "qk_first", 2.0, 9.0), bench_row("sima", "auto", 1.0, 5.0)],
          [bench_row("softmax", "", 6.0, 30.0), bench_row("sima", "qk_first", 3.0, 6.0), bench_row("sima", "auto", 9.0, 5.0)],
          [bench_row("softmax", "", 5.0, 11.0), bench_row("sima", "qk_first", 2.5, 7.0), bench_row("sima", "auto", 2.0, 4.0)]]
med = reproduce.median_rows(rounds)
check([(b["forward_ms"], b["train_ms"]) for b in med] == [(5.0, 11.0), (2.5, 7.0), (2.0, 5.0)], "medians: %r" % med)
check(rounds[0][0]["forward_ms"] == 4.0, "median_rows changed its input")
ratios = report_speed.table3_ratios({"bench_table3": [{"bench": med}]})
check([(r[4], r[5], round(r[6], 4)) for r in ratios] == [("qk_first", 2.0, round(11 / 7, 4)), ("auto", 2.5, 2.2)],
      "ratios: %r" % ratios)
check("different rows" in refused(lambda: reproduce.median_rows([rounds[0], rounds[1][::-1]])), "mismatched rounds")
# Claim 7 in RESULTS.md has the ratios and a link to the speed page; the page has every block's row,
# and says "not run" for a bench row without a record.
claim7 = []
report_speed.speed_section({"bench_table3": [{"bench": med, "command": "sima-bench", "date": "d"}]}, claim7)
page = report_speed.speed_page({"bench_table3": [{"bench": med, "command": "sima-bench", "date": "d"}]})
check(any(report_speed.SPEED_PAGE in line for line in claim7) and not any("| 64 | 256 | 8 | sima |" in line for line in claim7),
      "claim 7 without its link, or with the block rows: %r" % claim7)
check(sum(line.startswith("| 64 | 256 | 8 | ") for line in page) == 3 and page.count("not run\n") == len(report_speed.BENCH_ROWS) - 1,
      "speed page: %r" % page)

# The sweep table names each sweep row's model from its config, and the records of other widths
# (runs/sweeps/widths/) get their own table, each row with the model its record keeps.
import report_protocol  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    out = []
    report_protocol.sweep_section(d, out)
    model = sweep.describe_model(sweep.model_of(reproduce.ROOT, "deit_sima"))
    check(any(("deit_sima: " + model) in line for line in out), "sweep table without its models: %r" % out[:4])
    wide = {"row": "deit_sima", "epochs_planned": 2, "exit_code": 0, "cpu_s": 2.0,
            "model": {"name": "deit_tiny_patch4_28", "embed_dim": 96, "depth": 4, "num_heads": 4},
            "epochs": [{"epoch": 1, "val_top1": 88.0, "epoch_cpu_seconds": 1.0},
                       {"epoch": 2, "val_top1": 90.5, "epoch_cpu_seconds": 1.0}]}
    reproduce.write_json(os.path.join(d, "sweeps", "widths", "deit_sima_w96_e2.json"), wide)
    out = []
    report_protocol.widths_section(d, out)
    rows = [line for line in out if line.startswith("| deit_sima |")]
    check(rows == ["| deit_sima | deit_tiny_patch4_28, 96 wide, depth 4, 4 heads | 2 | 90.50 | 90.50 (2) | 1 s | epoch 2 |"
                   " not reached |"], "widths table: %r" % rows)

# Time to accuracy: the epochs from the fixed-budget runs' curves (every seed), the seconds per epoch
# from the 2-thread timing run after its first (warm-up) epoch.
import tta  # noqa: E402


def curve(reach90, reach92, n=6):
    return {"exit_code": 0, "epochs": [{"epoch": i + 1, "val_top1": 92.0 if reach92 and i + 1 >= reach92 else
                                        90.0 if i + 1 >= reach90 else 85.0} for i in range(n)]}


timing = {"exit_code": 0, "epochs": [{"epoch": 1, "epoch_seconds": 20.0}, {"epoch": 2, "epoch_seconds": 10.0},
                                     {"epoch": 3, "epoch_seconds": 12.0}]}
s = tta.summary([curve(3, None), curve(5, 6), {"exit_code": 1, "epochs": []}], [timing])
check(s["s_per_epoch"] == 11.0 and abs(s["img_per_s"] - 50000 / 11.0) < 1e-9, "timing: %r" % s)
check(s["s_range"] == (10.0, 12.0) and s["rounds"] == 1, "one round's range: %r" % s)
# Rounds pool their epochs after each one's first (a failed round counts for nothing): median of 10, 12, 14, 30.
slow = {"exit_code": 0, "epochs": [{"epoch": 1, "epoch_seconds": 99.0}, {"epoch": 2, "epoch_seconds": 14.0},
                                   {"epoch": 3, "epoch_seconds": 30.0}]}
p = tta.summary([], [timing, slow, {"exit_code": 1, "epochs": timing["epochs"]}])
check((p["s_per_epoch"], p["s_range"], p["rounds"]) == (13.0, (10.0, 30.0), 2), "two rounds pooled: %r" % p)
hit, of, mean, sd, secs = s["targets"][90.0]
check((hit, of, mean, secs) == (2, 2, 4.0, 44.0) and abs(sd - 2 ** 0.5) < 1e-9, "to 90: %r" % (s["targets"][90.0],))
check(s["targets"][92.0] == (1, 2, 6, None, 66.0), "to 92: %r" % (s["targets"][92.0],))
check(tta.summary([curve(3, None)], [])["targets"][90.0][4] is None, "untimed: no seconds")
s = tta.summary([{"exit_code": 1}], [timing])
check(s["targets"] is None and s["s_per_epoch"] == 11.0, "no finished seed: the timing alone %r" % s)

# `run` skips a final row the protocol refuses (no sweep point yet), names it, runs the rest, and
# exits 3; here nothing else is asked for, so nothing is started.
import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    reproduce.RUNS, reproduce.OUT = d, os.path.join(d, "runs")
    fake_bin = os.path.join(d, "bin")
    os.makedirs(fake_bin)
    for b in ("sima-train", "sima-eval", "sima-bench"):
        with open(os.path.join(fake_bin, b), "w") as f:
            f.write("#!/bin/sh\nexit 99\n")
        os.chmod(os.path.join(fake_bin, b), 0o755)
    reproduce.BIN = fake_bin
    args = argparse.Namespace(smoke="", allow_unconverged=False, rows="cvt_sima", seeds="", jobs=1, threads=1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = refused(lambda: reproduce.cmd_run(args))
    check(code == "3", "exit code of a run with a refused row: %r" % code)
    check("skipping cvt_sima: cvt_sima: the cvt_sima sweep has neither converged nor reached its budget cap" in
          out.getvalue() and "0 runs to do" in out.getvalue(), "refusal message: %r" % out.getvalue())
    # The timing rounds alternate the attentions: every row's round 0, then every row's round 1.
    args.rows = "tta_deit_softmax,tta_deit_sima,bench_table3"
    with contextlib.redirect_stdout(io.StringIO()):
        _, timed, train = reproduce.plan_run(args)
    want = [("tta_deit_softmax", 0), ("tta_deit_sima", 0), ("bench_table3", 0)] + \
        [("tta_deit_softmax", r) for r in range(1, tta.ROUNDS)] + [("tta_deit_sima", r) for r in range(1, tta.ROUNDS)]
    want = sorted(want, key=lambda t: t[1])
    check(tta.ROUNDS >= 2 and timed == want and not train, "timed order: %r" % (timed,))

# `sweep --cap-only` stops a row at its budget cap: the point past it is not started.
with tempfile.TemporaryDirectory() as d:
    reproduce.RUNS, reproduce.OUT = d, os.path.join(d, "runs")
    for e, top1 in ((25, 90.0), (50, 91.0), (100, 92.0)):  # each doubling gains 1 point: not converged
        record(d, "cvt_sima", e, [top1])
    started = []
    real_point = reproduce.run_sweep_point
    reproduce.run_sweep_point = lambda row, epochs, threads: started.append((row, epochs))  # None: "interrupted"
    try:
        for cap_only, want in ((True, []), (False, [("cvt_sima", 200)])):
            started.clear()
            args = argparse.Namespace(smoke="", rows="cvt_sima", jobs=1, threads=1, cap_only=cap_only)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                reproduce.cmd_sweep(args)
            check(started == want, "--cap-only %s started %r: %r" % (cap_only, started, out.getvalue()))
        check("reached its budget cap of 100 epochs" not in out.getvalue(), "no cap message without the flag")
    finally:
        reproduce.run_sweep_point = real_point

# Two launchers never hold the same run folder: a second claim (another process) is refused while
# the first holds it, and granted after.
import subprocess  # noqa: E402
import runner  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "runs", "cvt_sima_s0")
    probe = ("import sys; sys.path.insert(0, %r); import runner\n"
             "with runner.claimed(%r) as mine: print(mine)") % (os.path.dirname(runner.__file__), out)
    with runner.claimed(out) as mine:
        other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
        check(mine and other == "False", "claimed twice: %r %r" % (mine, other))
    other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    check(other == "True", "not released: %r" % other)

# A speed or timing row is not timed while another sima-train runs: `run` names it and exits 4.
import shutil  # noqa: E402
import time  # noqa: E402
import signal  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    reproduce.RUNS, reproduce.OUT = d, os.path.join(d, "runs")
    reproduce.BIN = os.path.join(d, "bin")
    os.makedirs(reproduce.BIN)
    for b in ("sima-train", "sima-eval", "sima-bench"):  # never started: the row is refused first
        with open(os.path.join(reproduce.BIN, b), "w") as f:
            f.write("#!/bin/sh\nexit 99\n")
        os.chmod(os.path.join(reproduce.BIN, b), 0o755)
    sleeper = os.path.join(d, "sima-train")  # another launcher's trainer, as /proc names it
    shutil.copy("/bin/sleep", sleeper)
    proc = subprocess.Popen([sleeper, "30"])
    try:
        for _ in range(200):  # until it has exec'd under its name
            if (proc.pid, "sima-train") in runner.other_trainers():
                break
            time.sleep(0.01)
        args = argparse.Namespace(smoke="", allow_unconverged=False, rows="bench_fig1_dim", seeds="", jobs=1, threads=1)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = refused(lambda: reproduce.cmd_run(args))
        check(code == "4" and "not timing bench_fig1_dim seed 0: the machine is busy (" in out.getvalue() and
              "sima-train %d" % proc.pid in out.getvalue(), "busy machine: %r %r" % (code, out.getvalue()))
        os.kill(proc.pid, signal.SIGSTOP)  # paused to make room for the timing: not counted
        for _ in range(200):
            if (proc.pid, "sima-train") not in runner.other_trainers():
                break
            time.sleep(0.01)
        check((proc.pid, "sima-train") not in runner.other_trainers(), "a stopped trainer counted as busy")
    finally:
        proc.kill()
        proc.wait()

# A run cut off by a sitting resumes from its state (sima-train's train state, or the PyTorch twin's
# twin_state.pt with its flat config) when it planned the same epochs, else starts afresh
# (parked.start_or_resume); a twin run is parked and unparked like sima-train's, and counts as
# finished once its last epoch is logged.
import parked  # noqa: E402


def run_folder(out, config, state):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    if state:
        open(os.path.join(out, state), "wb").close()


with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "runs", "torch_twin_cvt_sima_s0")
    twin_cfg = {"train.epochs": 100, "train.seed": 0}
    run_folder(out, twin_cfg, None)
    check(not parked.start_or_resume(d, out, 100) and not os.path.exists(out), "no state: starts over, cleared")
    run_folder(out, twin_cfg, "twin_state.pt")
    check(parked.start_or_resume(d, out, 100) and os.path.isfile(os.path.join(out, "twin_state.pt")),
          "twin state: resumes")
    check(not parked.start_or_resume(d, out, 50) and not os.path.exists(out), "other epochs: starts over")
    sima = os.path.join(d, "runs", "cvt_sima_s0")
    run_folder(sima, {"train": {"epochs": 100}}, "train_state.safetensors")
    check(parked.start_or_resume(d, sima, 100), "sima-train state: resumes")
    run_folder(out, twin_cfg, "twin_state.pt")
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"kind": "epoch", "epoch": 99}) + "\n")
    check(parked.park(d, os.path.join(d, "runs"), ["torch_twin_cvt_sima_s0"]) == ["torch_twin_cvt_sima_s0"],
          "twin parked")
    shutil.rmtree(out)  # a fresh machine: only the parked copy
    check(parked.start_or_resume(d, out, 100) and os.path.isfile(os.path.join(out, "twin_state.pt")),
          "twin unparked and resumed")
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"kind": "epoch", "epoch": 100}) + "\n")
    check(parked.finished(out), "a twin run with its last epoch is finished")

# Parked states and weights are gzip-compressed and unparked to the same bytes; a folder parked
# before compression (plain files) still unparks.
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "runs", "e100_deit_sima_s0")
    run_folder(out, {"train": {"epochs": 100}}, None)
    state = bytes(range(256)) * 4000 + b"\0" * 500000  # compressible, like a state's zeros
    for f in ("train_state.safetensors", "best.safetensors"):
        with open(os.path.join(out, f), "wb") as fh:
            fh.write(state)
    check(parked.park(d, os.path.join(d, "runs")) == ["e100_deit_sima_s0"], "parked")
    pd = parked.parked_dir(d, out)
    check(sorted(os.listdir(pd)) == ["best.safetensors.gz", "config.json", "train_state.safetensors.gz"],
          "parked files: %r" % sorted(os.listdir(pd)))
    check(os.path.getsize(os.path.join(pd, "train_state.safetensors.gz")) < len(state) // 4, "not compressed")
    shutil.rmtree(out)
    check(parked.start_or_resume(d, out, 100), "compressed park: resumes")
    for f in ("train_state.safetensors", "best.safetensors"):
        with open(os.path.join(out, f), "rb") as fh:
            check(fh.read() == state, "%s unparked to other bytes" % f)
    old = os.path.join(d, "runs", "e100_deit_sima_s1")
    os.makedirs(os.path.join(d, "parked", "e100_deit_sima_s1"))
    run_folder(os.path.join(d, "parked", "e100_deit_sima_s1"), {"train": {"epochs": 100}}, None)
    with open(os.path.join(d, "parked", "e100_deit_sima_s1", "train_state.safetensors"), "wb") as fh:
        fh.write(state)
    check(parked.start_or_resume(d, old, 100), "a plain parked state resumes")
    with open(os.path.join(old, "train_state.safetensors"), "rb") as fh:
        check(fh.read() == state, "a plain parked state unparked to other bytes")

# A launcher stopped with SIGTERM, or with Ctrl-C (SIGINT to its whole process group, as a terminal
# sends it), passes SIGTERM to its trainer, records the sitting's CPU (the trainer saves its state and
# exits 130) and starts no other row; the next seed never begins. The trainer runs in its own session:
# the terminal's SIGINT never reaches it (the fake one notes it if it does).
def stopped_launcher(d, stop_signal):
    fake = os.path.join(d, "bin")
    os.makedirs(fake)
    trainer = ("#!%s\nimport os, signal, sys, time\n"
               "def stop(*_):\n    open(os.environ['FAKE_MARK'] + '.term', 'w').close()\n    sys.exit(130)\n"
               "def interrupted(*_):\n    open(os.environ['FAKE_MARK'] + '.int', 'w').close()\n"
               "signal.signal(signal.SIGTERM, stop)\nsignal.signal(signal.SIGINT, interrupted)\n"
               "if sys.argv[1:] == ['--version']:\n    print('sima-train 0.0.0 (fake)')\n    sys.exit(0)\n"
               "open(os.environ['FAKE_MARK'], 'w').close()\n"
               "end = time.time() + 90\nwhile time.time() < end:\n    sum(range(10000))\n"  # burns CPU until stopped
               % sys.executable)
    for b, text in (("sima-train", trainer), ("sima-eval", "#!/bin/sh\nexit 99\n"), ("sima-bench", "#!/bin/sh\nexit 99\n")):
        with open(os.path.join(fake, b), "w") as f:
            f.write(text)
        os.chmod(os.path.join(fake, b), 0o755)
    mark = os.path.join(d, "started")
    launcher = subprocess.Popen([sys.executable, reproduce.__file__, "run", "--smoke", d, "--rows", "e50_deit_sima",
                                 "--jobs", "1"], env=dict(os.environ, SIMA_BIN_DIR=fake, FAKE_MARK=mark),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for _ in range(3000):  # until the trainer runs
        if os.path.exists(mark) or launcher.poll() is not None:
            break
        time.sleep(0.01)
    time.sleep(0.5)  # some CPU to count
    os.killpg(launcher.pid, stop_signal)
    try:
        said = launcher.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        launcher.kill()
        said = launcher.communicate()[0]
    spent_path = os.path.join(d, "runs", "e50_deit_sima_s0.spent.json")
    spent = json.load(open(spent_path)) if os.path.exists(spent_path) else []
    name = signal.Signals(stop_signal).name
    check(launcher.returncode == 130 and os.path.exists(mark + ".term") and "reproduce.py: stopped" in said,
          "launcher stop by %s: exit %r, trainer stopped %s, said %r" % (name, launcher.returncode,
                                                                       os.path.exists(mark + ".term"), said))
    check(len(spent) == 1 and spent[0]["cpu_s"] > 0, "%s: the stopped sitting's CPU is recorded: %r" % (name, spent))
    check(not os.path.exists(os.path.join(d, "runs", "e50_deit_sima_s1.log")), "%s: a row started after the stop" % name)
    check(not os.path.exists(mark + ".int"), "%s: the trainer got the terminal's SIGINT" % name)


# The heatmap tally under the panels: maps above a flat map's share, per row and summed over the rows
# drawn from seed 0's final run (the heatmap names that run: same date, exit 0) and over all rows.
def heat(row, date, marks):
    images = [{"foreground_share": 0.5, "maps": {"q": {"foreground_mass": q}, "k": {"foreground_mass": k}}}
              for q, k in marks]
    return (row, {"row": row, "trained": {"date": date}, "result": {"images": images}})


class FakeTable:
    records = {"a": [{"seed": 0, "date": "d1", "exit_code": 0}], "b": [{"seed": 0, "date": "d2", "exit_code": 0}],
               "c": []}


done = [heat("a", "d1", [(0.6, 0.4), (0.7, 0.9)]), heat("b", "d0", [(0.2, 0.51)]), heat("c", "d1", [(0.5, 0.6)])]
tally = report.heatmap_tally(FakeTable, done)
check(tally == [("a", True, 3, 4), ("b", False, 1, 2), ("c", False, 1, 2)], "heatmap tally: %r" % (tally,))
line = report.heatmap_tally_lines(tally)[0]
check("a 3 of 4; b 1 of 2 (earlier checkpoint); c 1 of 2 (earlier checkpoint)" in line
      and "final run (1 of 3 rows): 3 of 4; over every panel above: 5 of 8" in line, "heatmap tally line: " + line)

# A claim cell names the seeds that diverged or failed beside the mean of those that finished (claim 4's
# "none" may diverge on one seed only), and says how many when none finished.
def cell_of(*recs, want=2):
    t = report.Table("", [("r", "", "fixed", want)], lambda row, seed: recs[seed] if seed < len(recs) else None)
    return t.cell("r")
ok = {"seed": 0, "exit_code": 0, "top1": 90.0}
nan = {"seed": 1, "exit_code": 1, "diverged": True, "error": "step 9: the loss is not finite (nan)"}
check(cell_of(ok, nan) == "90.00 (1 of 2 seeds finished; seed 1 diverged)", "one diverged: " + cell_of(ok, nan))
check(cell_of(dict(nan, seed=0), nan) == "seed 0 diverged, seed 1 diverged (2 of 2 seeds): step 9: the loss is not finite (nan)",
      "both diverged: " + cell_of(dict(nan, seed=0), nan))
check(cell_of(ok, dict(ok, seed=1, top1=91.0)) == "90.50 ± 0.71" and cell_of(ok) == "90.00 (1 of 2 seeds)",
      "finished: %s / %s" % (cell_of(ok, dict(ok, seed=1, top1=91.0)), cell_of(ok)))

# Claim 4's "none" against the paper's divergence: the seeds that diverged, or that every seed trained
# (not reproduced, at the fixed budget); "so far" while seeds are still to run.
import report_claims  # noqa: E402
import verdicts  # noqa: E402
def divergence_of(*recs, want=2):
    t = report.Table("", [("r", "", "fixed", want)], lambda row, seed: recs[seed] if seed < len(recs) else None)
    return report_claims.divergence_verdict(t, "r")
check(divergence_of() == "—", "no record: " + divergence_of())
check(divergence_of(ok, nan) == "as the paper: seed 1 diverged (1 of 2)", "one diverged: " + divergence_of(ok, nan))
check(divergence_of(dict(nan, seed=0), nan) == "as the paper: seeds 0, 1 diverged (2 of 2)",
      "both diverged: " + divergence_of(dict(nan, seed=0), nan))
check(divergence_of(ok, dict(ok, seed=1)) == "not reproduced at 50 epochs: 2 of 2 seeds trained, none diverged",
      "both trained: " + divergence_of(ok, dict(ok, seed=1)))
check(divergence_of(ok) == "not reproduced at 50 epochs: 1 of 1 seed trained, none diverged, so far",
      "one of two trained: " + divergence_of(ok))
failed = {"seed": 1, "exit_code": 1, "error": "test evaluation failed: no such file"}  # failed, not diverged
check(divergence_of(ok, failed) == "not reproduced at 50 epochs: 1 of 2 seeds trained, none diverged",
      "one failed: " + divergence_of(ok, failed))

# A verdict drawn while a row has seeds still to run says so; with every seed in, it does not; a
# fixed-budget verdict short of convergence names its budget.
def verdict_of(a, b, want=3, budget=None):
    recs = {"a": a, "b": b}
    t = report.Table("", [("a", "", "fixed", want), ("b", "", "fixed", 3)],
                     lambda row, seed: recs[row][seed] if seed < len(recs[row]) else None)
    j = report_claims.judge_family(t, [([("a", 1), ("b", -1)], -2.8)])[0]
    return report_claims.verdict_cell(t, j, ("a", "b"), budget)
three = [dict(ok, seed=s, top1=90.0 + 0.1 * s) for s in range(3)]
low = [dict(ok, seed=s, top1=89.0 + 0.2 * s) for s in range(3)]
check(verdict_of(low[:2], three)[0].endswith(", so far"), "partial row: %r" % (verdict_of(low[:2], three),))
check(not verdict_of(low, three)[0].endswith("so far"), "complete rows: %r" % (verdict_of(low, three),))
check(not verdict_of(low[:2], three, want=2)[0].endswith("so far"), "a 2-seed row complete")
check(verdict_of(low, three, budget=50)[0].endswith(" at 50 epochs") and
      not verdict_of(low, three, budget=100)[0].endswith("epochs"), "budget in the verdict")
check(verdict_of(low, three)[1] == "seeds + test set, analytic (unpaired)", "no per-image data: analytic")
# with per-image records on every run, the paired bootstrap
bits = lambda top1: {"correct_hex": "f" * int(top1 * 25) + "0" * (2500 - int(top1 * 25)), "eval": {"count": 10000}}  # noqa: E731
lowb = [dict(r, **bits(r["top1"])) for r in low]
threeb = [dict(r, **bits(r["top1"])) for r in three]
check(verdict_of(lowb, threeb)[1] == "paired bootstrap (images, seeds)", "per-image data: %r" % (verdict_of(lowb, threeb),))
check(verdict_of(lowb, three)[1] == "seeds + test set, analytic (unpaired)", "one side without per-image data")

# The interaction (claims 2 and 3): (a - b) - (c - d) over the four rows, the analytic form's d.
def interaction_of(a, b, c, d, want=3):
    recs = {"a": a, "b": b, "c": c, "d": d}
    t = report.Table("", [(r, "", "fixed", want if r == "a" else 3) for r in "abcd"],
                     lambda row, seed: recs[row][seed] if seed < len(recs[row]) else None)
    return report_claims.judge_family(t, [([("a", 1), ("b", -1), ("c", -1), ("d", 1)], 2.4)])[0]
top = [[r["top1"] for r in g] for g in (low, three, three, low)]
j4 = interaction_of(low, three, three, low)
e4 = verdicts.analytic(top, [1, -1, -1, 1])
check(abs(j4["d"] - 2 * (statistics.mean(top[0]) - statistics.mean(top[1]))) < 1e-9 and j4["form"] == "analytic",
      "interaction d: %r" % j4)
check((j4["lo"], j4["hi"]) == verdicts.interval(e4, 0.95), "interaction interval: %r" % j4)
check(interaction_of([], three, low, three) is None, "interaction with a row not run")

# The 94 % target (report_claims.target_line): the best row's mean over 3 seeds, never one seed.
def target_of(soft, sima):
    recs = {"cvtwide_softmax": soft, "cvtwide_sima": sima}
    t = report.Table("", [(r, "", "train", 3) for r in recs],
                     lambda row, seed: recs[row][seed] if seed < len(recs[row]) else None)
    return report_claims.target_line(t, report_claims.WIDE)
high = [dict(ok, seed=s, top1=t1) for s, t1 in enumerate((94.3, 93.9, 94.1))]  # mean 94.10
check("not measured yet" in target_of([], [dict(ok, seed=0, top1=95.0)]), "one seed is no headline: "
      + target_of([], [dict(ok, seed=0, top1=95.0)]))
check(target_of(three, high).endswith("the best row, cvtwide_sima, 94.10: met."), "met: " + target_of(three, high))
check("cvtwide_softmax, 90.10: missed by 3.90 (still to run: cvtwide_sima 2 of 3 seeds)" in target_of(three, high[:2]),
      "missed: " + target_of(three, high[:2]))

# What the widened CvT's sweep predicts (report_claims.reach_line): its validation top-1 at the chosen
# point (converged or capped) plus the other architectures' gaps between their chosen sweep point and
# their final SimA rows' test mean.
with tempfile.TemporaryDirectory() as d:
    fin = {"cvt_sima": [dict(ok, seed=s, top1=t1) for s, t1 in enumerate((93.2, 93.3, 93.4))],  # mean 93.30
           "xcit_sima": [dict(ok, seed=s, top1=93.0) for s in range(3)], "deit_sima": [dict(ok, seed=0, top1=91.0)]}
    t = report.Table("", [(r, "", "train", 3) for r in fin],
                     lambda row, seed: fin[row][seed] if seed < len(fin[row]) else None)
    check("neither converged nor reached its cap" in report_claims.reach_line(t, d),
          "no sweep point: " + report_claims.reach_line(t, d))
    record(d, "cvtwide_sima", 100, [90.0, 94.5])
    check(report_claims.reach_line(t, d) == "Its sweep chose 100 epochs (capped), where it reached 94.50 % on the"
          " validation split.",
          "no gaps: " + report_claims.reach_line(t, d))
    record(d, "cvt_sima", 100, [93.9])   # gap -0.60
    record(d, "xcit_sima", 100, [93.2])  # gap -0.20
    record(d, "deit_sima", 100, [92.0])  # its final row has 1 of 3 seeds: no gap
    line = report_claims.reach_line(t, d)
    check("cvt_sima −0.60, xcit_sima −0.20 points" in line and "predicts 93.90 to 94.30 %" in line
          and "the target is within that range" in line, "prediction: " + line)
    record(d, "cvtwide_sima", 100, [94.7])
    check("predicts 94.10 to 94.50 %" in report_claims.reach_line(t, d)
          and "above the target" in report_claims.reach_line(t, d), "above: " + report_claims.reach_line(t, d))

    # Converged at 50 (doubling to 100 lost 0.2 points): the 50-epoch point is the one that predicts.
    record(d, "cvtwide_sima", 50, [93.0, 94.2])
    record(d, "cvtwide_sima", 100, [94.0])
    line = report_claims.reach_line(t, d)
    check("chose 50 epochs (converged), where it reached 94.20 %" in line and "predicts 93.60 to 94.00 %" in line
          and "the target is within that range" in line, "converged: " + line)

# The CPU ledger of the header (results/report_budget.py): every record counts once, by where it lies;
# this round's CPU from dated sittings, else from a record dated in the round; undated parked sittings
# predate the round.
import report_budget  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    w = lambda rel, obj: reproduce.write_json(os.path.join(d, rel), obj)  # noqa: E731
    w("deit_sima/s0.json", {"cpu_s": 100.0, "date": "2026-11-29 10:00 UTC"})
    w("e100_deit_sima/s0.json", {"cpu_s": 300.0, "date": "2026-12-02 10:00 UTC",
                                 "sittings": [{"cpu_s": 200.0, "date": "2026-12-02 03:00 UTC"},
                                              {"cpu_s": 100.0, "date": "2026-11-30 03:00 UTC"}]})
    w("dino_x/s0.json", {"cpu_s": 50.0, "date": "2026-12-01 01:00 UTC", "sittings": [{"cpu_s": 50.0}]})
    w("sweeps/deit_sima_e25.json", {"cpu_s": 10.0, "date": "2026-11-20 00:00 UTC"})
    w("sweeps/widths/deit_sima_w96_e25.json", {"cpu_s": 20.0})
    w("pre_protocol/cvt_sima/s0.json", {"cpu_s": 40.0})
    w("parked/e100_deit_softmax_s0/spent.json", [{"cpu_s": 7.0, "date": "2026-12-02 04:00 UTC"}, {"cpu_s": 5.0}])
    w("parked/e100_deit_softmax_s0/other.json", {"cpu_s": 1000.0})
    w("deit_sima/heatmap.json", {"trained": {}})
    w("quickstart_precision/bf16_s0.json", {"cpu_s": 200.0, "sittings": [{"cpu_s": 200.0, "date": "2026-12-02 13:00 UTC"}]})
    w("fp16_headroom/study_none.json", {"cpu_s": 3.0, "date": "2026-12-02 16:40 UTC"})
    w("cvt_sima/s0.json", {"cpu_s": 0.0, "date": "2026-11-27 08:16 UTC",  # trained again twice: counted apart
                           "per_image": {"cpu_s": 30.0, "date": "2026-12-03 10:00 UTC"},
                           "per_image_attempts": [{"cpu_s": 5.0, "date": "2026-11-30 10:00 UTC"}]})
    w("discarded/dino_xcit_sima_e80.json", {"cpu_s": 200.0, "date": "2026-12-02 18:10 UTC", "what": "x"})
    led = report_budget.ledger(d)
    check(led == {"rows": [4, 450.0, 250.0], "sweeps": [1, 10.0, 0.0], "widths": [1, 20.0, 0.0],
                  "pre_protocol": [1, 40.0, 0.0], "parked": [1, 12.0, 7.0], "quickstart_precision": [1, 200.0, 200.0], "fp16_headroom": [1, 3.0, 3.0],
                  "rederive": [2, 35.0, 30.0], "discarded": [1, 200.0, 200.0]}, "ledger: %r" % led)

# A parked run of a claim table is named under it with the epochs its parked metrics log.
with tempfile.TemporaryDirectory() as d:
    os.makedirs(os.path.join(d, "parked", "e100_deit_sima_s0"))
    with open(os.path.join(d, "parked", "e100_deit_sima_s0", "metrics.jsonl"), "w") as f:
        for e in (1, 2, 3):
            f.write(json.dumps({"kind": "step", "epoch": e - 0.5}) + "\n" + json.dumps({"kind": "epoch", "epoch": e}) + "\n")
    out = []
    report_claims.under_way(d, ["e100_deit_sima"], out)
    check(out == [], "under way without a train state: %r" % out)
    with open(os.path.join(d, "parked", "e100_deit_sima_s0", "train_state.safetensors.gz"), "wb") as f:
        f.write(b"state")
    report_claims.under_way(d, ["e100_deit_sima", "e100_deit_sima_1head"], out)
    check(out == ["Under way (parked between sittings, `results/runs/parked/`): e100_deit_sima seed 0, 3 of 100 epochs.\n"],
          "under way: %r" % out)
    out = []
    report_claims.under_way(d, ["e50_deit_sima"], out)
    check(out == [], "under way, other rows: %r" % out)

# A sweep's next point, parked between sittings, shows its progress in the sweep table.
with tempfile.TemporaryDirectory() as d:
    record(d, "cvt_sima", 25, [80.0, 90.0])
    record(d, "cvt_sima", 50, [80.0, 91.0])
    out = []
    report_protocol.sweep_section(d, out)
    check("| cvt_sima | | | | | | next: 100 epochs |" in out, "next point, nothing parked: %r" % out)
    run_folder(os.path.join(d, "parked", "sweep_cvt_sima_e100"), {"train": {"epochs": 100}}, "train_state.safetensors")
    with open(os.path.join(d, "parked", "sweep_cvt_sima_e100", "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps({"kind": "epoch", "epoch": e}) + "\n" for e in (1, 2)))
    out = []
    report_protocol.sweep_section(d, out)
    check("| cvt_sima | | | | | | next: 100 epochs; parked at 2 of 100 epochs |" in out, "parked next point: %r" % out)

# A sitting killed outright (SIGKILL at its session's end) never wrote out.spent.json; at resume the
# epochs no recorded sitting ran are counted from the trainer's own per-epoch times.
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "run_s0")
    os.makedirs(out)
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps({"kind": "epoch", "epoch": e, "epoch_seconds": 10.0, "epoch_cpu_seconds": 11.0 + e})
                        + "\n" for e in range(1, 6)))
    lost = runner.lost_sitting(out, [], 5, end=0)
    check(lost and lost["epochs_run"] == 5 and lost["cpu_s"] == 70.0 and lost["wall_s"] == 50.0
          and lost["date"] == "1970-01-01 00:00 UTC" and lost["resumed"] is False, "first sitting lost: %r" % lost)
    lost = runner.lost_sitting(out, [{"cpu_s": 30.0, "epochs_run": 2}], 5, end=0)
    check(lost and lost["epochs_run"] == 3 and lost["cpu_s"] == 15.0 + 16.0 + 14.0 and lost["resumed"] is True,
          "epochs 3-5 lost after a recorded sitting of 2: %r" % lost)
    check(runner.lost_sitting(out, [{"cpu_s": 30.0, "epochs_run": 5}], 5) is None, "every epoch counted")
    check(runner.lost_sitting(out, [{"cpu_s": 30.0}], 5) is None, "an older sitting without epochs_run: no guess")
    # run_sitting adds the stand-in before the resumed sitting's own entry.
    argv = [sys.executable, "-c", "pass"]
    _, _, spent = runner.run_sitting(argv, dict(os.environ, OMP_NUM_THREADS="2"), out, True)
    check(len(spent) == 2 and spent[0].get("reconstructed") and spent[0]["epochs_run"] == 5
          and spent[1]["epochs_run"] == 0 and spent[1]["threads"] == 2 and runner.spent_totals(spent)["cpu_s"] >= 70.0,
          "resumed after a killed sitting: %r" % spent)

for stop_signal in (signal.SIGTERM, signal.SIGINT):
    with tempfile.TemporaryDirectory() as d:
        stopped_launcher(d, stop_signal)

finish()
