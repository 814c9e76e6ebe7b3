#!/usr/bin/env python3
"""The SimA paper's claims at Fashion-MNIST scale: runs every row of the table and writes
docs/RESULTS.md from what the runs recorded, under the protocol at the top of that page.

    python3 results/reproduce.py list                 # rows, seeds, which runs are recorded
    python3 results/reproduce.py sweep [--rows A,B] [--jobs 2]   # epoch sweeps, validation split
    python3 results/reproduce.py run [--rows A,B] [--seeds 0,1] [--by-seed] [--jobs 2] [--threads 1]
    python3 results/reproduce.py heatmaps             # saliency panels from seed 0's finished runs
    python3 results/reproduce.py park [NAME ...]      # cut-off runs' train states into results/runs/parked/
    python3 results/reproduce.py report               # docs/RESULTS.md (and docs/results/speed.md) from results/runs/

`sweep` (results/sweep.py) trains each architecture's SimA row on 50 000 training images with
doubling epoch counts, evaluating 10 000 held-out training images every epoch, until doubling adds
less than 0.3 points; records in results/runs/sweeps/. DINO's sweep scores each point by the 20-NN
of its teacher's frozen features on the held-out images. The test set is never read there.

`run` trains each (row, seed) that has no record yet. Claim 1's rows (and their PyTorch twin) train
with build/bin/sima-train on all 60 000 training images (configs/paper/<row>.json, --set train.seed=S,
the epoch count its architecture's sweep chose or its budget cap, sweep.BUDGET_CAP), the test set
evaluated once after the last epoch. The rows of claims 2 to 5, e50_<row> (results/fixed.py), train
a fixed budget of 50 epochs on the validation split, evaluated every epoch, then the test set once
(with each image's correctness); claims 2 and 3 again at DeiT's converged count, rows e100_<row>.
A row <p>_<row> (results/precision_rows.py) trains row <row>'s recipe with --set train.precision=<p>.
`run` also evaluates DINO rows with sima-eval (k-NN and linear probe), runs the speed rows with
sima-bench and the time-to-accuracy timing rows (results/tta.py: each DeiT attention at two threads,
alone), and writes one JSON record per run to results/runs/<row>/s<seed>.json (command, wall and CPU
time, the test top-1, outcome). It refuses a claim-1 row whose sweep has neither converged nor reached
its cap unless given --allow-unconverged. Records are committed, so the table can be filled over
several sittings; `run` never repeats a recorded run (delete its record to repeat it), and a run
cut off by a killed sitting resumes from its train state, on another machine too once `park` has
copied that state into results/runs/parked/ and it is committed (results/parked.py). Runs go `--jobs` at a time with
`--threads` OpenMP threads each (2 x 1 by default on a 2-core machine: these models are too small
to use two threads well). `run` exits 3 when it skipped a row the protocol refuses (named at the
start), and 4, timing nothing, when the speed or timing rows find another sima-train, sima-bench or
sima-eval running. To end a sitting, send SIGTERM to the launcher (`pkill -TERM -f reproduce.py`) or press
Ctrl-C: its trainers save their state, their sittings' CPU is recorded, an evaluation under way
finishes, nothing new starts, and it exits 130; then `park` the cut-off runs. Killing it with
SIGKILL loses the running sittings' CPU.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  (results/sweep.py: the protocol's epoch sweeps)
import tta  # noqa: E402  (results/tta.py: time to accuracy per DeiT attention)
import fixed  # noqa: E402  (results/fixed.py: claims 2-5 at one fixed budget)
import latency  # noqa: E402  (results/latency.py: batch-1 latency of claim 5's DeiT)
import parked  # noqa: E402  (results/parked.py: cut-off runs carried between sittings)
import precision_rows  # noqa: E402  (results/precision_rows.py: rows at bf16 / fp16)
import frozen_eval  # noqa: E402  (results/frozen_eval.py: DINO's frozen features and their baselines)
import runner  # noqa: E402
from runner import (ROOT, BIN, INTERRUPTED, binary_version, claimed, host, diverged, epoch_records, git_commit,  # noqa: E402,F401
                    other_trainers, run_logged, run_sitting, shell_line, spent_totals, user_command, write_json)
RUNS = os.path.join(ROOT, "results", "runs")
PNGS = os.path.join(ROOT, "docs", "results")
OUT = os.path.join(ROOT, "runs", "paper")  # run folders (not committed)
SMOKE = []  # --smoke: extra sima-train/sima-eval flags for a tiny budget
ALLOW_UNCONVERGED = False
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3 with python3-torch (setup.sh), for the twin rows  # run --allow-unconverged: final runs at a sweep's longest point

# (row, claims, kind, seeds). kind: train = supervised sima-train; dino = sima-train with a dino
# section, then k-NN and linear probe; bench = sima-bench presets.
ROWS = [
    # Claim 1 (and the targets): the budget cap's epochs, all 60 000 training images, test once at the end.
    # In the order `run` takes them: the architectures that converge fastest first.
    ("cvt_softmax", [1], "train", 3),
    ("cvt_sima", [1], "train", 3),
    ("xcit_xca", [1], "train", 3),
    ("xcit_sima", [1], "train", 3),
    ("deit_softmax", [1], "train", 3),
    ("deit_sima", [1], "train", 3),
    ("torch_twin_cvt_sima", [1], "torch", 3),  # cvt_sima trained by PyTorch (results/torch_twin.py)
    # The 94 % target: the CvT twice as wide, its own sweep (results/report_claims.py, width_section).
    ("cvtwide_softmax", ["94"], "train", 3),
    ("cvtwide_sima", ["94"], "train", 3),
] + [(r, claims, "fixed", seeds) for r, claims, seeds in fixed.all_rows()  # claims 2-5: fixed budgets
] + [(r, claims, "fixed" if fixed.epochs_of(r) else "train", seeds)  # a row's recipe at bf16 / fp16
     for r, _, claims, seeds in precision_rows.all_rows()] + [
    ("dino_xcit_xca", [6], "dino", 2),  # 2 seeds a side: SimA − XCA with an interval (results/report_claim6.py)
    ("dino_xcit_sima", [6], "dino", 2),
    ("bench_table3", [7], "bench", 1),  # Table 3, D read as the token width (the paper's section 2.1)
    ("bench_table3_head", [7], "bench", 1),  # the same, D read as the head width
    ("bench_fig1_tokens", [7], "bench", 1),
    ("bench_fig1_dim", [7], "bench", 1),
    (latency.ROW, [5, 7], "bench", 1),  # batch-1 latency of claim 5's DeiT per attention (results/latency.py)
] + [(tta.PREFIX + r, ["tta"], "tta", tta.ROUNDS) for r in tta.ROWS]  # time to accuracy: 2-thread epoch times
ROW = {r[0]: r for r in ROWS}
# (timed runs per measurement, rounds) of the speed rows where sima-bench's default (7 runs, one
# round) is too few: at Table 3's small shapes a block takes a few ms, and on this machine a whole
# run of the preset moves by up to 2x from one minute to the next. Each round runs the whole preset
# (so the variants alternate); a row's time is the median over the rounds of its per-round medians.
BENCH_REPS = {"bench_table3": (101, 3), "bench_table3_head": (11, 3)}

# Saliency maps (the paper's Figure 3) from these rows' seed-0 checkpoints, on the test images in
# docs/images: the norms of q̂ and k̂ per token in the last attention layer, or for softmax rows the
# class token's attention row. `heatmaps` makes them after `run`; the checkpoints are not committed.
HEATMAP_ROWS = ["deit_sima", "deit_softmax", fixed.PREFIX + "deit_sima_relu_mlp", "xcit_sima", "xcit_xca", "cvt_sima",
                "cvt_softmax", "dino_xcit_sima", "dino_xcit_xca"]
HEATMAP_IMAGES = os.path.join(ROOT, "docs", "images")
FOREGROUND = 0.1  # grey level above which a pixel is the object (Fashion-MNIST's background is 0)
PRECISION_HELP = ("precision rows: <p>_<row> trains <row>'s recipe, seeds and evaluation with\n"
                  "--set train.precision=<p> (results/precision_rows.py):\n  %s\none end to end, e.g.:\n"
                  "  python3 results/reproduce.py run --rows fp16_e50_xcit_sima_nonorm --jobs 1 --threads 1"
                  % "\n  ".join("%s (%d seeds)" % (r[0], r[3]) for r in precision_rows.all_rows()))


def config_path(row):
    """configs/paper/<config>.json of a row: its own name, less the prefix of a twin (torch_twin_),
    fixed-budget (e50_, e100_) or timing (tta_) row."""
    for prefix in ("torch_twin_", tta.PREFIX):
        if row.startswith(prefix):
            row = row[len(prefix):]
    row = fixed.base_row(row)
    return os.path.join(ROOT, "configs", "paper", row + ".json")


def record_path(row, seed):
    return os.path.join(RUNS, row, "s%d.json" % seed)


def load_record(row, seed):
    p = record_path(row, seed)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def write_record(row, seed, rec):
    write_json(record_path(row, seed), rec)


def final_plan(row, config):
    """The protocol for a final run (docs/RESULTS.md, "Protocol"): all 60 000 training images, the
    epoch count its architecture's sweep chose on the validation split, the test set evaluated once
    at the end. {"sets": extra --set flags, "epochs", "from": where the epoch count comes from}."""
    with open(config) as f:
        cfg = json.load(f)
    if cfg.get("data", {}).get("validation", 0):
        sys.exit("reproduce.py: %s sets data.validation: a final run trains on all the training images"
                 % os.path.relpath(config, ROOT))
    if SMOKE:  # the smoke check's own tiny budget
        return {"sets": [], "epochs": 1, "from": "smoke"}
    srow = sweep.sweep_row_of(row)
    if srow is None:  # no sweep for this architecture (DINO): the config's epochs
        e = cfg["train"]["epochs"]
        return {"sets": ["--set", "train.eval_every=%d" % e], "epochs": e, "from": "config (no sweep)"}
    chosen, how = sweep.choice(RUNS, srow)
    if chosen is None:
        nxt = sweep.status(RUNS, srow)[1]
        if not ALLOW_UNCONVERGED:
            sys.exit("reproduce.py: %s: the %s sweep has neither converged nor reached its budget cap of %d epochs"
                     " (next point: %s epochs); run `reproduce.py sweep --rows %s` first, or pass --allow-unconverged"
                     % (row, srow, sweep.BUDGET_CAP[srow], nxt, srow))
        done = [e for e in sweep.SWEEPS[srow] if sweep.final_top1(sweep.load(RUNS, srow, e)) is not None]
        if not done:
            sys.exit("reproduce.py: %s: the %s sweep has no point recorded" % (row, srow))
        chosen, src = done[-1], "sweep %s, not converged: its longest point" % srow
    elif how == "capped":
        src = "sweep %s, not converged by its budget cap" % srow
    else:
        src = "sweep %s, converged" % srow
    return {"sets": ["--set", "train.epochs=%d" % chosen, "--set", "train.eval_every=%d" % chosen],
            "epochs": chosen, "from": "%s (%d epochs)" % (src, chosen)}


def run_bench(row, out, env):
    """A speed row: sima-bench's preset, once per round; the record's rows carry the median times."""
    preset = row[len("bench_"):]
    argv = [os.path.join(BIN, "sima-bench"), "attention", "--preset", preset, "--json"]
    reps, rounds = BENCH_REPS.get(row, (0, 1))
    if reps:
        argv += ["--reps", str(reps)]
    os.makedirs(out, exist_ok=True)
    env = dict(env, OMP_NUM_THREADS="2")  # the speed rows use the whole machine
    rec = {"command": "OMP_NUM_THREADS=2 " + shell_line(argv), "rounds": rounds, "wall_s": 0.0, "cpu_s": 0.0}
    per_round = []
    for i in range(rounds):
        log = os.path.join(out, "bench%d.jsonl" % i)
        code, wall, cpu, last = run_logged(argv, env, log)
        rec["wall_s"], rec["cpu_s"], rec["exit_code"] = round(rec["wall_s"] + wall, 1), round(rec["cpu_s"] + cpu, 1), code
        if code != 0:
            rec["error"] = last
            return rec
        with open(log) as f:
            per_round.append([json.loads(l) for l in f if l.startswith("{")])
    rec["bench"] = median_rows(per_round)
    if rounds > 1:
        rec["round_ms"] = [[[b.get("forward_ms"), b.get("train_ms")] for b in r] for r in per_round]
    return rec


def median_rows(per_round):
    """The first round's rows with forward_ms and train_ms replaced by their medians over the rounds."""
    rows = [dict(b) for b in per_round[0]]
    key = lambda b: (b["variant"], b.get("order"), b["tokens"], b["dim"], b["heads"])
    if any([key(b) for b in r] != [key(b) for b in rows] for r in per_round):
        raise SystemExit("reproduce.py: the bench rounds ran different rows")
    for i, b in enumerate(rows):
        for key in ("forward_ms", "train_ms"):
            if key in b:
                b[key] = statistics.median(r[i][key] for r in per_round)
    return rows


def keep_curves(row, seed, out):
    """Seed 0's training curves (the trainer's curves.png) into docs/results/<row>.png for the report."""
    png = os.path.join(out, "curves.png")
    if seed == 0 and os.path.exists(png):
        os.makedirs(PNGS, exist_ok=True)
        shutil.copyfile(png, os.path.join(PNGS, row + ".png"))


def run_one(row, seed, threads):
    _, claims, kind, _ = ROW[row]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    out = os.path.join(OUT, "%s_s%d" % (row, seed))
    rec = {"row": row, "seed": seed, "claims": claims, "kind": kind, "commit": git_commit(),
           "binary": binary_version(BIN), "threads": threads,
           "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
           "load_before": os.getloadavg()[0], **host()}
    if kind == "bench":
        rec.update(latency.run(BIN, ROOT, out, env) if row == latency.ROW else run_bench(row, out, env))
        return rec
    if kind == "tta":
        return dict(rec, **tta.run_timing(row, env, out, RUNS, SMOKE))
    if kind == "fixed":
        frec = fixed.run(row, seed, env, out, RUNS, SMOKE)
        if frec:
            keep_curves(row, seed, out)
        return frec and dict(rec, **frec)

    twin = kind == "torch"  # the same config trained by the PyTorch twin, from Debian's /usr/bin/python3
    config = config_path(row)
    plan = final_plan(row, config)
    prog = [TORCH_PYTHON, os.path.join(ROOT, "results", "torch_twin.py"), "--threads", str(threads)] if twin else \
        [os.path.join(BIN, "sima-train")]
    argv = prog + ["--config", config, "--set", "train.seed=%d" % seed] + plan["sets"] + precision_rows.sets(row) + \
        ["--out", out, "--quiet"] + SMOKE
    resume = parked.start_or_resume(RUNS, out, plan["epochs"])
    code, last, spent = run_sitting(argv + (["--resume"] if resume else []), env, out, resume)
    if code == INTERRUPTED:
        return None
    epochs = epoch_records(out)
    rec.update(command=user_command(argv, threads), **spent_totals(spent), exit_code=code,
               precision=precision_rows.precision_of(row, config),
               epochs_from=plan["from"], resumed=resume, epochs=[{k: e[k] for k in e if k in ("epoch", "test_top1", "test_top5", "test_loss", "train_loss",
                                                       "teacher_entropy", "kl", "loss") + precision_rows.SCALER_KEYS} for e in epochs])
    if runner.scaler_state(out):  # float16: the loss scale and skipped steps at the last logged step
        rec["loss_scaler"] = runner.scaler_state(out)
    if code != 0:
        rec["error"] = last
        rec["diverged"] = diverged(last)
    elif kind in ("train", "torch"):
        rec["top1"] = epochs[-1]["test_top1"]
        if precision_rows.split(row)[0]:  # each test image's correctness too, for a paired interval
            fixed.evaluate_test(rec, out, env, threads, SMOKE, keep_top1=True)
    keep_curves(row, seed, out)
    if kind == "dino" and code == 0:  # the teacher's frozen features on the test set, and their baselines
        ckpt = os.path.join(out, "model.safetensors")
        rec["eval"] = frozen_eval.evaluate(frozen_eval.argv(BIN, ckpt, [], smoke=bool(SMOKE)), env, threads,
                                           out + ".eval.json")
        blocks = frozen_eval.ALL_CLASS_BLOCKS  # as the paper, the class tokens of several blocks concatenated
        rec[frozen_eval.BLOCKS_KEY] = frozen_eval.evaluate(
            frozen_eval.argv(BIN, ckpt, [], smoke=bool(SMOKE), blocks=blocks), env, threads, out + ".eval_b%d.json" % blocks)
        rec["baselines"] = frozen_eval.baselines(BIN, ckpt, [], env, threads, out + ".eval", smoke=bool(SMOKE))
    return rec


def cmd_list(args):
    for row, claims, kind, seeds in ROWS:
        done = [s for s in range(seeds) if load_record(row, s) is not None]
        print("%-26s claims %-8s %-5s seeds %d, recorded %s%s" % (
            row, ",".join(map(str, claims)), kind, seeds, done or "none",
            ", train.precision %s" % precision_rows.split(row)[0] if precision_rows.split(row)[0] else ""))


def use_smoke_dir(d):
    """--smoke: a check of this script itself, with records, pictures and runs under d."""
    global RUNS, PNGS, OUT
    RUNS, PNGS, OUT = (os.path.join(d, sub) for sub in ("records", "png", "runs"))


def refused_rows(rows):
    """{row: reason} for the final rows among `rows` the protocol does not allow yet (final_plan's
    refusal, e.g. a sweep that has neither converged nor reached its cap)."""
    refused = {}
    for r in rows:
        if ROW[r][2] in ("train", "torch", "dino"):
            try:
                final_plan(r, config_path(r))
            except SystemExit as e:
                refused[r] = str(e)
    return refused


def plan_run(args):
    """What `run` makes: (refused rows {row: why}, the timed rows' runs, the training runs), each
    run a (row, seed) without a record; exits on an unknown row or a missing binary."""
    if args.smoke:  # tiny budget, everything outside the repository
        use_smoke_dir(args.smoke)
        SMOKE.extend(["--set", "data.train_subset=256", "--set", "data.test_subset=128", "--set", "train.epochs=1",
                      "--set", "data.batch_size=64"])
        sweep.VALIDATION = 128  # the time-to-accuracy rows' held-out images
    global ALLOW_UNCONVERGED
    ALLOW_UNCONVERGED = args.allow_unconverged
    rows = args.rows.split(",") if args.rows else [r[0] for r in ROWS]
    for r in rows:
        if r not in ROW:
            sys.exit("reproduce.py: unknown row '%s' (rows: %s)" % (r, ", ".join(ROW)))
    for b in ("sima-train", "sima-eval", "sima-bench"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit("reproduce.py: %s missing: build first (./setup.sh)" % os.path.join(BIN, b))
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    refused = refused_rows(rows)  # skipped, named, exit 3
    for r, why in refused.items():
        print("reproduce.py: skipping %s: %s" % (r, why.replace("reproduce.py: ", "", 1)), flush=True)
    todo = [(r, s) for r in rows if r not in refused for s in range(ROW[r][3])
            if load_record(r, s) is None and (seeds is None or s in seeds)]
    if getattr(args, "by_seed", False):  # every row's seed 0 first (in the order given), then every row's seed 1, ...
        todo.sort(key=lambda t: t[1])
    alone = ("bench", "tta")  # timed with the whole machine, one at a time, after the rest
    done = sum(load_record(r, s) is not None for r in rows for s in range(ROW[r][3]))
    print("reproduce.py: %d runs to do (%d recorded already)" % (len(todo), done), flush=True)
    # the timed rows by seed, rows in order within it: a round of every timing row before the next (tta.ROUNDS)
    timed = sorted((t for t in todo if ROW[t[0]][2] in alone), key=lambda t: t[1])
    return (refused, timed, [t for t in todo if ROW[t[0]][2] not in alone])


def cmd_run(args):
    refused, bench, train = plan_run(args)
    lock = threading.Lock()

    def go(t):
        row, seed = t
        if runner.STOP.is_set():  # SIGTERM or Ctrl-C: the running sittings are being recorded, nothing new starts
            return
        with claimed(os.path.join(OUT, "%s_s%d" % t)) as mine:
            if not mine:
                with lock:
                    print("  %s seed %d: running in another launcher, skipped" % t, flush=True)
                return
            if load_record(row, seed) is not None:  # finished by another launcher meanwhile
                return
            rec = run_one(row, seed, args.threads)
            finish(row, seed, rec)

    def finish(row, seed, rec):
        t = (row, seed)
        if rec is None:
            with lock:
                print("  %s seed %d: interrupted, its train state saved (`reproduce.py park` keeps it)" % t, flush=True)
            return
        write_record(row, seed, rec)
        parked.drop(RUNS, os.path.join(OUT, "%s_s%d" % (row, seed)))
        with lock:
            outcome = ("top-1 %.2f" % rec["top1"]) if "top1" in rec else rec.get("error", "done")
            print("  %s seed %d: %s, %.0f s wall, %.0f s CPU" % (row, seed, outcome, rec["wall_s"], rec["cpu_s"]),
                  flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(go, train))
    exit_if_stopped()
    busy = other_trainers() if bench and not args.smoke else []  # the smoke check times nothing
    if busy:  # a timed row beside another run would time the sharing, not the row
        print("reproduce.py: not timing %s: the machine is busy (%s); run them when nothing else runs"
              % (", ".join("%s seed %d" % t for t in bench), ", ".join("%s %d" % (n, p) for p, n in busy)), flush=True)
        sys.exit(4)
    for t in bench:  # alone, so nothing else runs while they time
        go(t)
    if refused:
        sys.exit(3)


def run_sweep_point(row, epochs, threads):
    """One sweep point: trains (or resumes) runs/paper/sweep_<row>_e<E> and returns its record, or None
    when the trainer was interrupted (SIGTERM). CPU time adds up over the sittings that ran it (one whose
    script was killed too is not counted)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
    out = os.path.join(OUT, "sweep_%s_e%d" % (row, epochs))
    resume = parked.start_or_resume(RUNS, out, epochs)
    argv = sweep.argv_for(BIN, ROOT, row, epochs, out, resume, SMOKE)
    code, last, spent = run_sitting(argv, env, out, resume)
    if code == INTERRUPTED:
        return None
    epochs_done = sweep.epoch_rows(epoch_records(out))
    rec = {"row": row, "epochs_planned": epochs, "seed": sweep.SWEEP_SEED, "split": "validation",
           "validation": sweep.VALIDATION, "validation_seed": sweep.VALIDATION_SEED, "commit": git_commit(),
           "binary": binary_version(BIN), "threads": threads,
           "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
           "command": user_command(sweep.argv_for(BIN, ROOT, row, epochs, out, False, SMOKE), threads),
           **spent_totals(spent), "exit_code": code, "epochs": epochs_done, "model": sweep.model_of(ROOT, row)}
    if code != 0:
        rec["error"] = last
        rec["diverged"] = diverged(last)
    elif sweep.judged_by_knn(row):
        judge_by_knn(rec, out, env, threads)
    return rec


def judge_by_knn(rec, out, env, threads):
    """A DINO sweep point's score: the 20-NN on the teacher's frozen features, the 10 000 held-out
    training images as queries (the record's val_top1; its CPU is added to cpu_s), with the linear
    probe from the same extraction, and beside them the random-init and pixel baselines on the same
    split (rec["baselines"], their CPU not in cpu_s; results/frozen_eval.py)."""
    ckpt = os.path.join(out, "model.safetensors")
    ev = frozen_eval.evaluate(frozen_eval.argv(BIN, ckpt, frozen_eval.VALIDATION_SPLIT, smoke=bool(SMOKE)),
                              env, threads, out + ".knn.json")
    rec["eval"] = ev
    rec["cpu_s"] = round(rec["cpu_s"] + ev["cpu_s"], 1)
    if ev["exit_code"] != 0:
        rec["exit_code"], rec["error"] = ev["exit_code"], "k-NN evaluation failed: " + ev["error"]
        return
    if ev["result"].get("eval_split") != "validation":
        sys.exit("reproduce.py: the k-NN of %s did not evaluate the validation split" % out)
    rec["val_top1"] = frozen_eval.scores(ev)[0]
    rec["metric"] = "weighted %d-NN top-1 on the teacher's frozen features" % sweep.KNN_K
    rec["baselines"] = frozen_eval.baselines(BIN, ckpt, frozen_eval.VALIDATION_SPLIT, env, threads, out + ".knn",
                                             smoke=bool(SMOKE))


def cmd_sweep(args):
    if args.smoke:
        use_smoke_dir(args.smoke)
        sweep.SWEEPS = {r: [1, 2] for r in sweep.SWEEPS}
        sweep.VALIDATION = 128
        SMOKE.extend(["--set", "data.train_subset=256", "--set", "data.batch_size=64"])
    rows = args.rows.split(",") if args.rows else list(sweep.SWEEPS)
    for r in rows:
        if r not in sweep.SWEEPS:
            sys.exit("reproduce.py: '%s' has no sweep (sweeps: %s)" % (r, ", ".join(sweep.SWEEPS)))
    lock = threading.Lock()

    def go(row):  # a row's points in order: whether the next runs depends on the last
        while not runner.STOP.is_set():
            chosen, nxt, _ = sweep.status(RUNS, row)
            if chosen is not None or nxt is None:
                with lock:
                    print("  %s: %s" % (row, "converged at %d epochs" % chosen if chosen else "every point recorded"),
                          flush=True)
                return
            if args.cap_only and nxt > sweep.BUDGET_CAP[row]:
                with lock:
                    print("  %s: reached its budget cap of %d epochs; the %d-epoch point past it is not run"
                          " (--cap-only)" % (row, sweep.BUDGET_CAP[row], nxt), flush=True)
                return
            with claimed(os.path.join(OUT, "sweep_%s_e%d" % (row, nxt))) as mine:
                if not mine:
                    with lock:
                        print("  %s %d epochs: running in another launcher, skipped" % (row, nxt), flush=True)
                    return
                if sweep.load(RUNS, row, nxt) is not None:  # finished by another launcher meanwhile
                    continue
                rec = run_sweep_point(row, nxt, args.threads)
            if rec is None:
                with lock:
                    print("  %s %d epochs: interrupted, its train state saved (`reproduce.py park` keeps it)"
                          % (row, nxt), flush=True)
                return
            write_json(sweep.record_path(RUNS, row, nxt), rec)
            parked.drop(RUNS, os.path.join(OUT, "sweep_%s_e%d" % (row, nxt)))
            with lock:
                top1 = sweep.final_top1(rec)
                print("  %s %d epochs: %s, %.0f s CPU" % (row, nxt, "val top-1 %.2f" % top1 if top1 is not None
                                                          else rec.get("error", "failed"), rec["cpu_s"]), flush=True)
            if rec["exit_code"] != 0:
                return

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(go, rows))
    exit_if_stopped()


def exit_if_stopped():
    """After a launcher's SIGTERM or Ctrl-C: its sittings are recorded and their states saved; exit 130."""
    if runner.STOP.is_set():
        print("reproduce.py: stopped; the cut-off runs' sittings are recorded: `reproduce.py park` "
              "keeps them for another machine, the next `run` or `sweep` here resumes them", flush=True)
        sys.exit(INTERRUPTED)


def heatmap_record_path(row):
    return os.path.join(RUNS, row, "heatmap.json")


def load_heatmap(row):
    p = heatmap_record_path(row)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def cmd_heatmaps(args):
    if args.smoke:
        use_smoke_dir(args.smoke)
    rows = args.rows.split(",") if args.rows else HEATMAP_ROWS
    for row in rows:
        if row not in ROW or ROW[row][2] in ("bench", "tta"):
            sys.exit("reproduce.py: '%s' is not a training row" % row)
        ckpt = os.path.join(OUT, "%s_s0" % row, "model.safetensors")
        trained = load_record(row, 0)
        if not trained or trained.get("exit_code") != 0:
            # a run still training (or parked, or failed) leaves a checkpoint that is not its final one
            print("  %s: seed 0 has no finished record yet, so %s is not its final checkpoint: skipped"
                  % (row, os.path.relpath(ckpt, ROOT)))
            continue
        if not os.path.exists(ckpt):
            print("  %s: no checkpoint %s (its record was made elsewhere: run it here first): skipped"
                  % (row, os.path.relpath(ckpt, ROOT)))
            continue
        with open(config_path(row)) as f:
            attention = json.load(f)["model"].get("attention", {}).get("type", "softmax")
        out = os.path.join(PNGS, "heatmaps", row)
        if os.path.isdir(out):
            shutil.rmtree(out)
        argv = [os.path.join(BIN, "sima-heatmap"), "--checkpoint", ckpt, "--image", HEATMAP_IMAGES, "--out", out,
                "--which", "cls" if attention == "softmax" else "both", "--scale", "6",
                "--foreground-above", str(FOREGROUND), "--json"]
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("reproduce.py: %s failed: %s" % (shell_line(argv), p.stderr.strip()))
        result = json.loads(p.stdout)
        for im in result["images"]:  # keep the panels (image | maps); the single overlays repeat them
            for f in im["files"]:
                if not f.endswith("_panel.png"):
                    os.remove(f)
            im["files"] = [os.path.relpath(f, ROOT) for f in im["files"] if f.endswith("_panel.png")]
            im["path"] = os.path.relpath(os.path.join(ROOT, im["path"]), ROOT)
        result["checkpoint"] = os.path.relpath(ckpt, ROOT)
        rec = {"row": row, "command": shell_line(argv), "commit": git_commit(), "attention": attention,
               "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "result": result,
               "trained": dict({k: trained.get(k) for k in ("seed", "date", "commit", "top1")},
                              epochs=len(trained.get("epochs") or []))}
        write_json(heatmap_record_path(row), rec)
        print("  %s: %d panels in %s" % (row, len(result["images"]), os.path.relpath(out, ROOT)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    pr = sub.add_parser("run", epilog=PRECISION_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--rows", default="", help="comma-separated rows (default: all; `list` names them)")
    pr.add_argument("--seeds", default="", help="comma-separated seeds (default: each row's all; two launchers can split a row)")
    pr.add_argument("--by-seed", action="store_true",
                    help="every row's seed 0 first, then every row's seed 1, ... (default: a row's seeds together)")
    pr.add_argument("--jobs", type=int, default=2, help="runs at a time")
    pr.add_argument("--threads", type=int, default=1, help="OpenMP threads per run")
    pr.add_argument("--smoke", default="", metavar="DIR",
                    help="check the script: 1 epoch on 256 images, records and runs under DIR")
    pr.add_argument("--allow-unconverged", action="store_true",
                    help="train final runs at the longest recorded sweep point when the sweep has not converged")
    sp = sub.add_parser("sweep", help="the protocol's epoch sweeps on the validation split (results/sweep.py)")
    sp.add_argument("--rows", default="", help="comma-separated sweep rows (default: all)")
    sp.add_argument("--jobs", type=int, default=2, help="rows at a time")
    sp.add_argument("--threads", type=int, default=1, help="OpenMP threads per run")
    sp.add_argument("--smoke", default="", metavar="DIR", help="check the script: 1 and 2 epochs, records under DIR")
    sp.add_argument("--cap-only", action="store_true",
                    help="stop each row at its budget cap (the points past it only measure what the cap leaves)")
    kp = sub.add_parser("park", help="copy cut-off runs' train states into results/runs/parked/ (results/parked.py)")
    kp.add_argument("names", nargs="*", help="run folders to park (default: every cut-off one), e.g. sweep_deit_sima_e100")
    kp.add_argument("--smoke", default="", metavar="DIR", help="the runs of run/sweep --smoke DIR")
    hp = sub.add_parser("heatmaps")
    hp.add_argument("--rows", default="", help="comma-separated rows (default: %s)" % ",".join(HEATMAP_ROWS))
    hp.add_argument("--smoke", default="", metavar="DIR", help="the checkpoints of run --smoke DIR; output under DIR")
    rp = sub.add_parser("report")
    rp.add_argument("--records", default="", help="read records from this folder (default: results/runs)")
    rp.add_argument("--to", dest="records_to", default="", help="write here instead of docs/RESULTS.md")
    a = ap.parse_args()
    if a.cmd == "list":
        cmd_list(a)
    elif a.cmd == "run":
        runner.stop_on_sigterm()
        cmd_run(a)
    elif a.cmd == "sweep":
        runner.stop_on_sigterm()
        cmd_sweep(a)
    elif a.cmd == "heatmaps":
        cmd_heatmaps(a)
    elif a.cmd == "park":
        if a.smoke:
            use_smoke_dir(a.smoke)
        names = parked.park(RUNS, OUT, a.names)
        print("reproduce.py: parked %d cut-off run(s) in %s%s" % (len(names), os.path.join(RUNS, "parked"),
                                                                   "".join("\n  " + n for n in names)))
    else:
        if a.records:
            RUNS = a.records
        import report
        report.write(ROOT, ROWS, load_record, a.records_to, heatmaps=[(r, load_heatmap(r)) for r in HEATMAP_ROWS],
                     runs=RUNS)
