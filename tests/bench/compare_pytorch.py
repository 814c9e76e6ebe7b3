#!/usr/bin/env python3
"""sima.cpp against PyTorch (CPU), side by side: `sima-bench model --json` and a PyTorch peer
on the same model, batch and thread count, one run after the other in one process sequence.

Cases (--cases, comma list; each with softmax and sima attention):
  deit_tiny       DeiT D=192, depth 12, 3 heads, 32x32 RGB, patch 4, batch 64
                  ours:  --model '{"name":"deit_tiny_patch4_32","drop_path_rate":0,"attention":{"type":A}}'
                  peer:  tests/bench/deit_peer.py --attn A (its default model)
  quickstart_cvt  the CvT of configs/quickstart.json (28x28 grey, 10 classes), batch 64
                  ours:  --model <configs/quickstart.json's "model"> with "attention":{"type":A}
                  peer:  tests/bench/cvt_peer.py --attn A (its twin, same layers and parameters)

Per round, case and attention: sima-bench (OMP_NUM_THREADS=T), then the peer (--threads T,
OMP_NUM_THREADS=T), the order swapped every other round so machine noise hits both sides.
Batch-1 latency: sima-bench's latency_b1_ms; the CvT peer's --latency (median of 50);
for the DeiT peer one more run with --batch 1 --steps 30, latency = 1000 / infer_img_s.
The median over --rounds of every metric goes in the table; ratios are ours / torch (so > 1 is
better for img/s, worse for ms and MiB). RSS is each whole process's peak (getrusage): the peers'
include the Python interpreter and libtorch. The peers train with plain cross-entropy and
AdamW(lr 1e-3, wd 0.01 on every parameter); sima-bench with label smoothing 0.1 and AdamW
(wd 0.05, none on norms/biases/tokens): the same work per step to within the elementwise updates.
On a shared machine the numbers swing by large factors (an OpenMP team of T threads stalls
whenever one of its cores is taken): the driver warns when the load average before it starts
leaves fewer than T cores free, and logs the load average before every run in --json (a
rough hint: it includes the previous runs of this driver).

--train-precision fp32|bf16 is the training step's: sima-bench model --train-precision, and the
peers train under torch.autocast("cpu", dtype=torch.bfloat16) at bf16 (docs/precision.md, "Training
precisions"). --precision fp32|fp32-packed|bf16|int8 is passed to sima-bench (its inference and batch-1 runs); fp32-packed is `--precision fp32 --pack-fp32`, float32 with the Linears'
weights packed once for oneDNN. Every case also runs the peer a second time with --int8: PyTorch's dynamic int8
(torch.ao.quantization.quantize_dynamic of every nn.Linear, the onednn engine when present, else
fbgemm), the second table compares our inference with it. --json FILE keeps every raw run.

--busy-core runs a spinning process (busy_core.py: `python3 -c 'while True: pass'`) during every
run of both sides, started before and killed and reaped after each one, so ours and the peer meet the
same contention; the table headers and --json say which mode ran. --csv FILE writes the tables' rows
(one per case and attention, bench_record.CSV_COLUMNS). --record DIR writes one JSON record of this
invocation (commit, date, CPU model and ISA flags, threads, precision, busy core, rounds, load
averages, every median and ratio; bench_record.py) to DIR/<UTC date-time>.json, through a temporary
file and a rename; bench_history.py turns the records of results/bench_history/ into
docs/bench_history.md.

Needs Debian's python3-torch for the peers (run them with /usr/bin/python3, --python to change).
The check run (about a minute at 2 threads on an idle 2-core machine):
  python3 tests/bench/compare_pytorch.py --rounds 1 --cases quickstart_cvt --reps 3 --steps 5
The full comparison (deit_tiny takes several minutes per round):
  python3 tests/bench/compare_pytorch.py --threads 2 --rounds 3 --json /tmp/compare.json
The same with one core taken by a spinner, as CSV:
  python3 tests/bench/compare_pytorch.py --threads 2 --rounds 3 --busy-core --csv /tmp/compare_busy.csv
A record for the bench history, then the page:
  python3 tests/bench/compare_pytorch.py --threads 2 --rounds 3 --record results/bench_history
  python3 tests/bench/bench_history.py
"""
import argparse, csv, json, os, shlex, statistics, subprocess, sys, time

import bench_record
from bench_record import ratio
from busy_core import busy_core

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES = ("deit_tiny", "quickstart_cvt")
ATTNS = ("softmax", "sima")
BATCH = 64
OURS_KEYS = ("train_img_per_s", "infer_img_per_s", "latency_b1_ms", "peak_rss_mb", "fraction_of_sgemm_peak",
             "infer_fraction_of_sgemm_peak", "train_step_ms", "infer_ms", "parameters")
PEER_KEYS = ("train_img_s", "infer_img_s", "latency_b1_ms", "peak_rss_mb", "train_step_ms", "parameters")


def die(msg):
    sys.exit(f"error: {msg}")


def run_json(cmd, threads, what, timeout, busy=False):
    """Runs cmd with OMP_NUM_THREADS=threads (with a busy core: busy_core.py's spinner, started before
    and killed after it); returns the last stdout line parsed as JSON."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    t0, load = time.perf_counter(), os.getloadavg()[0]
    try:
        with busy_core(busy):
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        die(f"{what}: cannot run {cmd[0]} ({e.strerror})")
    except subprocess.TimeoutExpired:
        die(f"{what}: no result after {timeout} s: {shlex.join(cmd)}")
    tail = " | ".join(line for line in (p.stderr or "").strip().splitlines()[-5:]) or "(no stderr)"
    if p.returncode != 0:
        die(f"{what} exited with {p.returncode}: {tail}  [{shlex.join(cmd)}]")
    lines = [line for line in p.stdout.strip().splitlines() if line.strip()]
    try:
        out = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        die(f"{what} printed no JSON line (stdout: {p.stdout.strip()[-200:]!r}; stderr: {tail})")
    print(f"  {what}: {time.perf_counter() - t0:.1f} s (load average before: {load:.2f})", file=sys.stderr,
          flush=True)
    out["_load_before"] = load  # the 1-minute load average when the run started (before the spinner)
    out["_busy_core"] = busy
    return out


def ours_model(case, attn):
    if case == "deit_tiny":
        return {"name": "deit_tiny_patch4_32", "drop_path_rate": 0, "attention": {"type": attn}}
    path = os.path.join(ROOT, "configs", "quickstart.json")
    try:
        with open(path) as f:
            model = dict(json.load(f)["model"])
    except (OSError, ValueError, KeyError) as e:
        die(f"cannot read the quickstart model from {path} ({e})")
    model["attention"] = {**model.get("attention", {}), "type": attn}
    return model


def run_ours(a, case, attn):
    cmd = [a.sima_bench, "model", "--model", json.dumps(ours_model(case, attn), separators=(",", ":")),
           "--batch", str(BATCH), "--json"] + (["--precision", "fp32", "--pack-fp32"] if a.precision == "fp32-packed"
                                               else ["--precision", a.precision])
    cmd += ["--train-precision", a.train_precision]
    if a.reps:
        cmd += ["--reps", str(a.reps)]
    r = run_json(cmd, a.threads, f"sima-bench {case} {attn}", a.timeout, a.busy_core)
    return {"cmd": cmd, "raw": [r], **{k: r.get(k) for k in OURS_KEYS}}


def run_peer(a, case, attn, int8=False):
    steps = ["--steps", str(a.steps)] if a.steps else []
    base = [a.python, a.peer if case == "deit_tiny" else a.cvt_peer, "--attn", attn, "--threads", str(a.threads)]
    base += ["--int8"] if int8 else ["--train-precision", a.train_precision]
    if case == "deit_tiny":
        cmd = base + ["--batch", str(BATCH)] + steps
        r = run_json(cmd, a.threads, f"pytorch peer {case} {attn}", a.timeout, a.busy_core)
        cmd1 = base + ["--batch", "1", "--steps", "30"]
        r1 = run_json(cmd1, a.threads, f"pytorch peer {case} {attn} batch 1", a.timeout, a.busy_core)
        if not r1.get("infer_img_s"):
            die(f"pytorch peer {case} {attn} batch 1: no infer_img_s in {r1}")
        r["latency_b1_ms"] = 1000.0 / r1["infer_img_s"]
        return {"cmd": cmd, "cmd_b1": cmd1, "raw": [r, r1], **{k: r.get(k) for k in PEER_KEYS}}
    cmd = base + ["--batch", str(BATCH), "--latency"] + steps
    r = run_json(cmd, a.threads, f"pytorch peer {case} {attn}", a.timeout, a.busy_core)
    return {"cmd": cmd, "raw": [r], **{k: r.get(k) for k in PEER_KEYS}}


def median(runs, key):
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def fr(x, y):
    """The ratio x / y as the tables print it."""
    r = ratio(x, y)
    return "—" if r is None else f"{r:.2f}"


def parse_args():
    p = argparse.ArgumentParser(description="sima-bench against the PyTorch peers, side by side.")
    p.add_argument("--sima-bench", default=os.path.join(ROOT, "build", "bin", "sima-bench"))
    p.add_argument("--peer", default=os.path.join(ROOT, "tests", "bench", "deit_peer.py"),
                   help="the DeiT peer")
    p.add_argument("--cvt-peer", default=os.path.join(ROOT, "tests", "bench", "cvt_peer.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch, for the peers")
    p.add_argument("--cases", default=",".join(CASES), help="comma list of: " + ", ".join(CASES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=0, help="sima-bench --reps (0: its default)")
    p.add_argument("--steps", type=int, default=0, help="the peers' --steps (0: their default)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed per run")
    p.add_argument("--json", metavar="FILE", help="write every raw run and the medians here")
    p.add_argument("--train-precision", default="fp32", choices=["fp32", "bf16"],
                   help="the training step's products, both sides (sima-bench --train-precision, torch autocast)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp32-packed", "bf16", "int8"],
                   help="sima-bench model --precision (inference and batch 1; training: --train-precision)")
    p.add_argument("--busy-core", action="store_true",
                   help="a spinning process (busy_core.py) during every run, ours and the peer's")
    p.add_argument("--record", metavar="DIR", help="write the bench history record DIR/<UTC date-time>.json")
    p.add_argument("--csv", metavar="FILE", help="write the tables' rows (one per case and attention) as CSV")
    a = p.parse_args()

    a.cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    for c in a.cases:
        if c not in CASES:
            die(f"--cases: unknown case '{c}' (known: {', '.join(CASES)})")
    if not a.cases:
        die("--cases is empty")
    for name, v in (("--rounds", a.rounds), ("--threads", a.threads), ("--timeout", a.timeout)):
        if v < 1:
            die(f"{name} must be >= 1, got {v}")
    if a.reps < 0 or a.steps < 0:
        die("--reps and --steps must be >= 0")
    if not (os.path.isfile(a.sima_bench) and os.access(a.sima_bench, os.X_OK)):
        die(f"sima-bench not found at {a.sima_bench} (cmake --build build --target sima-bench, or pass --sima-bench)")
    for flag, path, needed in (("--peer", a.peer, "deit_tiny" in a.cases),
                               ("--cvt-peer", a.cvt_peer, "quickstart_cvt" in a.cases)):
        if needed and not os.path.isfile(path):
            die(f"the PyTorch peer is missing: {path} (pass {flag})")
    if not os.path.isfile(a.python):
        die(f"{a.python} not found (the peers need a Python with torch: pass --python)")
    if a.record and os.path.exists(a.record) and not os.path.isdir(a.record):
        die(f"--record: {a.record} is not a directory")
    return a


def run_rounds(a):
    """Every round, case and attention: ours, the peer, the peer's int8, in an order reversed every
    other round. Returns {(case, attn): {side: [run, ...]}}."""
    runs = {(c, at): {"ours": [], "torch": [], "torch_int8": []} for c in a.cases for at in ATTNS}
    for rnd in range(a.rounds):
        for c in a.cases:
            for at in ATTNS:
                print(f"[round {rnd + 1}/{a.rounds}] {c} {at}", file=sys.stderr, flush=True)
                order = (("ours", run_ours), ("torch", run_peer),
                         ("torch_int8", lambda a, c, at: run_peer(a, c, at, int8=True)))
                for side, fn in order if rnd % 2 == 0 else order[::-1]:
                    runs[(c, at)][side].append({"round": rnd, **fn(a, c, at)})
    return runs


def medians(runs):
    med = {}
    for (c, at), sides in runs.items():
        med[(c, at)] = {side: {k: median(rs, k) for k in (OURS_KEYS if side == "ours" else PEER_KEYS)}
                        for side, rs in sides.items()}
        po, pt = med[(c, at)]["ours"]["parameters"], med[(c, at)]["torch"]["parameters"]
        if po is not None and pt is not None and po != pt:
            print(f"warning: {c} {at}: {po:,.0f} parameters here, {pt:,.0f} in the PyTorch peer: "
                  "the twin no longer matches the model", file=sys.stderr)
    return med


def mode(a):
    return "busy core (a spinning process during every run)" if a.busy_core else "idle (no busy core)"


def print_tables(a, med, load0, cores):
    print(f"\nsima.cpp vs PyTorch, training at {a.train_precision}, {a.threads} threads, batch {BATCH}, "
          f"median of {a.rounds} round(s), "
          f"{mode(a)}; ratio = ours / torch; load average {load0:.2f} on {cores} cores at the start\n")
    print("| case | attn | ours train img/s | torch train img/s | ratio | ours infer img/s | torch | ratio "
          "| ours b1 ms | torch b1 ms | ratio | ours RSS MiB | torch RSS | ratio | % SGEMM peak train | infer |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for (c, at), m in med.items():
        o, t = m["ours"], m["torch"]
        frac, ifrac = o["fraction_of_sgemm_peak"], o.get("infer_fraction_of_sgemm_peak")
        print(f"| {c} | {at} | {fmt(o['train_img_per_s'])} | {fmt(t['train_img_s'])} "
              f"| {fr(o['train_img_per_s'], t['train_img_s'])} | {fmt(o['infer_img_per_s'])} "
              f"| {fmt(t['infer_img_s'])} | {fr(o['infer_img_per_s'], t['infer_img_s'])} "
              f"| {fmt(o['latency_b1_ms'], 2)} | {fmt(t['latency_b1_ms'], 2)} "
              f"| {fr(o['latency_b1_ms'], t['latency_b1_ms'])} | {fmt(o['peak_rss_mb'])} "
              f"| {fmt(t['peak_rss_mb'])} | {fr(o['peak_rss_mb'], t['peak_rss_mb'])} "
              f"| {fmt(None if frac is None else 100 * frac)} | {fmt(None if ifrac is None else 100 * ifrac)} |")

    print(f"\nInference: ours at {a.precision} against PyTorch's dynamic int8 (ratio = ours / torch int8), "
          f"{mode(a)}\n")
    print("| case | attn | ours infer img/s | torch int8 infer img/s | ratio | ours b1 ms | torch int8 b1 ms | ratio |")
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for (c, at), m in med.items():
        o, q = m["ours"], m["torch_int8"]
        print(f"| {c} | {at} | {fmt(o['infer_img_per_s'])} | {fmt(q['infer_img_s'])} "
              f"| {fr(o['infer_img_per_s'], q['infer_img_s'])} | {fmt(o['latency_b1_ms'], 2)} "
              f"| {fmt(q['latency_b1_ms'], 2)} | {fr(o['latency_b1_ms'], q['latency_b1_ms'])} |")

    print("\nSimA vs softmax: throughput ratio sima / softmax (> 1: SimA faster)\n")
    print("| case | ours train | ours infer | torch train | torch infer |")
    print("|---|--:|--:|--:|--:|")
    for c in a.cases:
        s, x = med[(c, "sima")], med[(c, "softmax")]
        print(f"| {c} | {fr(s['ours']['train_img_per_s'], x['ours']['train_img_per_s'])} "
              f"| {fr(s['ours']['infer_img_per_s'], x['ours']['infer_img_per_s'])} "
              f"| {fr(s['torch']['train_img_s'], x['torch']['train_img_s'])} "
              f"| {fr(s['torch']['infer_img_s'], x['torch']['infer_img_s'])} |")


def make_record(a, med, started, load_start, cores):
    """The bench history record of this invocation (bench_record.py describes the fields)."""
    commit, dirty = bench_record.git_commit(ROOT)
    return {"schema": bench_record.SCHEMA, "commit": commit, "commit_dirty": dirty,
            "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "cpu": bench_record.cpu_info(),
            "threads": a.threads, "precision": a.precision, "busy_core": a.busy_core, "rounds": a.rounds,
            **({"train_precision": a.train_precision} if a.train_precision != "fp32" else {}),
            "batch": BATCH, "cores": cores, "reps": a.reps, "steps": a.steps,
            "load_average_start": list(load_start), "load_average_end": list(os.getloadavg()),
            "results": [{"case": c, "attn": at, "medians": m, "ratios": bench_record.ratios(m)}
                        for (c, at), m in med.items()]}


def write_outputs(a, runs, med, started, load_start, cores):
    if a.json:
        out = {"argv": sys.argv, "threads": a.threads, "precision": a.precision,
               "train_precision": a.train_precision, "busy_core": a.busy_core,
               "rounds": a.rounds, "batch": BATCH, "cores": cores, "load_average_at_start": load_start[0],
               "results": [{"case": c, "attn": at, "runs": runs[(c, at)], "medians": med[(c, at)]}
                           for (c, at) in runs]}
        try:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        except OSError as e:
            die(f"--json: cannot write {a.json} ({e.strerror})")
        print(f"\nraw runs and medians: {a.json}")
    if a.csv:
        try:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=bench_record.CSV_COLUMNS)
                w.writeheader()
                for (c, at), m in med.items():
                    w.writerow(bench_record.csv_row(c, at, m, a.threads, a.precision, a.busy_core))
        except OSError as e:
            die(f"--csv: cannot write {a.csv} ({e.strerror})")
        print(f"table rows as CSV: {a.csv}")
    if a.record:
        try:
            path = bench_record.write_atomic(a.record, started, make_record(a, med, started, load_start, cores))
        except OSError as e:
            die(f"--record: cannot write a record in {a.record} ({e})")
        print(f"bench history record: {path} (python3 tests/bench/bench_history.py --records {a.record})")


def main():
    a = parse_args()
    started, load_start, cores = bench_record.utc_now(), os.getloadavg(), os.cpu_count() or 1
    if load_start[0] + a.threads > cores + 0.5:
        print(f"warning: load average {load_start[0]:.2f} on {cores} cores before starting: with {a.threads} "
              "threads the runs share cores with other work and the numbers will be noisy", file=sys.stderr)
    runs = run_rounds(a)
    med = medians(runs)
    print_tables(a, med, load_start[0], cores)
    write_outputs(a, runs, med, started, load_start, cores)


if __name__ == "__main__":
    main()
