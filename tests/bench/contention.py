#!/usr/bin/env python3
"""How OpenMP waiting behaves on a shared machine: the quickstart CvT's training step and batch-64
inference (`sima-bench model --json`) and a short quickstart training (`sima-train`, 2560 images,
one epoch), at 2 threads on an idle core pair and with one core taken by a busy loop, for each
wait mode, against 1 thread on an idle machine.

Modes (--modes, comma list):
  spin      libgomp's default spin-wait, made explicit (GOMP_SPINCOUNT=300000, the value libgomp
            uses when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set), a fixed team of 2
            (SIMA_THREAD_GOVERNOR=0)
  passive   OMP_WAIT_POLICY=passive, a fixed team of 2
  spinN     GOMP_SPINCOUNT=N, a bounded spin (e.g. spin1000, spin10000), a fixed team of 2
  app       nothing set: what the apps choose by themselves (libgomp's default waiting and the
            thread governor, core/thread_governor.h; docs/performance.md)
  t1        1 thread, nothing set (the reference: the targets compare against t1 on an idle machine)
Every round runs every mode idle and busy (the busy loop: `python3 -c 'while True: pass'`, started
before and stopped after each busy run), in an order rotated every round so machine noise is
spread over the modes. The table has the medians over the rounds; the load averages are logged.

  python3 tests/bench/contention.py --rounds 3                 # about 10 minutes on 2 cores
  python3 tests/bench/contention.py --rounds 1 --skip-train    # the bench only, a minute
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

from busy_core import busy_core

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXED = {"SIMA_THREAD_GOVERNOR": "0"}
MODES = {"spin": dict(FIXED, GOMP_SPINCOUNT="300000"), "passive": dict(FIXED, OMP_WAIT_POLICY="passive"),
         "app": {}, "t1": {}}
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SIMA_THREAD_GOVERNOR")


def quickstart_model():
    with open(os.path.join(ROOT, "configs", "quickstart.json")) as f:
        return json.dumps(json.load(f)["model"])


def mode_vars(mode):
    if mode in MODES:
        return MODES[mode]
    if mode.startswith("spin") and mode[4:].isdigit():
        return dict(FIXED, GOMP_SPINCOUNT=mode[4:])
    sys.exit(f"error: unknown mode '{mode}' (valid: {', '.join(MODES)}, spinN)")


def env_for(mode):
    env = {k: v for k, v in os.environ.items() if k not in WAIT_VARS}
    env.update(mode_vars(mode), OMP_NUM_THREADS="1" if mode == "t1" else "2")
    return env


def run(cmd, env):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited with {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout, time.perf_counter() - t0


def measure(args, mode):
    env, out = env_for(mode), {}
    stdout, _ = run([os.path.join(args.bin, "sima-bench"), "model", "--model", quickstart_model(),
                     "--reps", str(args.reps), "--json"], env)
    j = json.loads(stdout.strip().splitlines()[-1])
    out.update(train_img_s=j["train_img_per_s"], infer_img_s=j["infer_img_per_s"], b1_ms=j["latency_b1_ms"],
               team_changes=j.get("team_changes", 0))
    if not args.skip_train:
        tmp = tempfile.mkdtemp(prefix="sima_contention_")
        try:
            _, secs = run([os.path.join(args.bin, "sima-train"), "--config", os.path.join(ROOT, "configs", "quickstart.json"),
                           "--set", "data.train_subset=2560", "--set", "train.epochs=1", "--set", "data.test_subset=1000",
                           "--out", os.path.join(tmp, "run")], env)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        out["sima_train_s"] = secs
    return out


def one(args, mode, busy):
    with busy_core(busy):  # busy_core.py: started before, killed and reaped after
        load = os.getloadavg()[0]
        r = measure(args, mode)
    r["load1"] = load
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="spin,passive,spin10000,app,t1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="sima-bench --reps")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--skip-train", action="store_true", help="sima-bench only")
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args()
    modes = args.modes.split(",")
    for m in modes:
        mode_vars(m)
    cases = [(m, b) for m in modes for b in (False, True)]
    runs = {c: [] for c in cases}
    print(f"uptime at start: {os.getloadavg()}", flush=True)
    for rnd in range(args.rounds):
        k = rnd % len(cases)
        for mode, busy in cases[k:] + cases[:k]:
            r = one(args, mode, busy)
            runs[(mode, busy)].append(r)
            print(f"round {rnd} {mode:8s} {'busy' if busy else 'idle'} {r}", flush=True)
    print(f"uptime at end: {os.getloadavg()}")
    report(runs, args)


def report(runs, args):
    keys = ["train_img_s", "infer_img_s", "b1_ms"] + ([] if args.skip_train else ["sima_train_s"])
    med = {c: {k: statistics.median(r[k] for r in v) for k in keys} for c, v in runs.items() if v}
    ref = med.get(("t1", False))
    print("\nmedians; x t1 = ratio to 1 thread on an idle machine (img/s: higher is better; s, ms: lower)")
    print(f"{'mode':8s} {'core':5s} " + " ".join(f"{k:>13s}" for k in keys) + "   train x t1  infer x t1")
    for (mode, busy), m in med.items():
        row = f"{mode:8s} {'busy' if busy else 'idle':5s} " + " ".join(f"{m[k]:13.2f}" for k in keys)
        if ref:
            row += f"   {m['train_img_s'] / ref['train_img_s']:10.2f}  {m['infer_img_s'] / ref['infer_img_s']:10.2f}"
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"mode": m, "busy": b, "runs": v} for (m, b), v in runs.items()], f, indent=1)


if __name__ == "__main__":
    main()
