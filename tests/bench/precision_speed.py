#!/usr/bin/env python3
"""Training speed at float32 and bf16, sima.cpp and PyTorch, in one run: the four numbers of a
training-precision comparison (ours fp32 / ours bf16 / PyTorch fp32 / PyTorch bf16 autocast).

Per round and attention (softmax, sima) on compare_pytorch.py's deit_tiny case (DeiT D=192, depth 12,
3 heads, 32x32 RGB, patch 4, batch 64): `sima-bench model --train-precision fp32`, the same at bf16,
tests/bench/deit_peer.py at fp32 and under torch.autocast("cpu", dtype=torch.bfloat16); the order is
reversed every other round so that machine noise hits every side. The table gives each side's median
training img/s over the rounds and the ratios a reader asks for: ours bf16 / ours fp32 (what bf16
gains here), ours bf16 / PyTorch bf16, PyTorch bf16 / PyTorch fp32. Pause other work on the machine
first: an OpenMP team of T threads stalls whenever one of its cores is taken.

    python3 tests/bench/precision_speed.py --rounds 3 --threads 2 [--json FILE]
Needs Debian's python3-torch for the peer (--python, default /usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import BATCH, ROOT, die, ours_model, run_json  # noqa: E402

ATTNS = ("softmax", "sima")
SIDES = ("ours_fp32", "ours_bf16", "torch_fp32", "torch_bf16")


def command(a, side, attn):
    """The command of one side, and the key of its training img/s in its JSON line."""
    who, precision = side.split("_")
    if who == "ours":
        model = json.dumps(ours_model("deit_tiny", attn), separators=(",", ":"))
        cmd = [a.sima_bench, "model", "--model", model, "--batch", str(BATCH), "--json", "--train-precision",
               precision] + (["--reps", str(a.reps)] if a.reps else [])
        return cmd, "train_img_per_s"
    cmd = [a.python, a.peer, "--attn", attn, "--threads", str(a.threads), "--batch", str(BATCH),
           "--train-precision", precision] + (["--steps", str(a.steps)] if a.steps else [])
    return cmd, "train_img_s"


def run_rounds(a):
    """{(attn, side): [train img/s, ...]} over the rounds."""
    runs = {(at, s): [] for at in ATTNS for s in SIDES}
    for rnd in range(a.rounds):
        for at in ATTNS:
            for side in SIDES if rnd % 2 == 0 else SIDES[::-1]:
                cmd, key = command(a, side, at)
                r = run_json(cmd, a.threads, f"[round {rnd + 1}/{a.rounds}] {side} {at}", a.timeout)
                if not isinstance(r.get(key), (int, float)):
                    die(f"{side} {at}: no {key} in {r}")
                runs[(at, side)].append(r[key])
    return runs


def table(a, runs):
    med = {k: statistics.median(v) for k, v in runs.items()}
    lines = [f"Training img/s, deit_tiny, batch {BATCH}, {a.threads} threads, median of {a.rounds} alternating "
             "round(s)\n",
             "| attn | ours fp32 | ours bf16 | PyTorch fp32 | PyTorch bf16 | ours bf16 / ours fp32 "
             "| ours bf16 / PyTorch bf16 | PyTorch bf16 / PyTorch fp32 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for at in ATTNS:
        m = {s: med[(at, s)] for s in SIDES}
        lines.append(f"| {at} | {m['ours_fp32']:.1f} | {m['ours_bf16']:.1f} | {m['torch_fp32']:.1f} "
                     f"| {m['torch_bf16']:.1f} | {m['ours_bf16'] / m['ours_fp32']:.2f} "
                     f"| {m['ours_bf16'] / m['torch_bf16']:.2f} | {m['torch_bf16'] / m['torch_fp32']:.2f} |")
    return "\n".join(lines), med


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sima-bench", default=os.path.join(ROOT, "build", "bin", "sima-bench"))
    p.add_argument("--peer", default=os.path.join(ROOT, "tests", "bench", "deit_peer.py"))
    p.add_argument("--python", default="/usr/bin/python3", help="the Python with torch, for the peer")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=0, help="sima-bench --reps (0: its default)")
    p.add_argument("--steps", type=int, default=0, help="the peer's --steps (0: its default)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed per run")
    p.add_argument("--json", metavar="FILE", help="write every run's img/s and the medians here")
    a = p.parse_args()
    if a.rounds < 1 or a.threads < 1 or a.reps < 0 or a.steps < 0:
        die("--rounds and --threads must be >= 1, --reps and --steps >= 0")
    for what, path in (("--sima-bench", a.sima_bench), ("--peer", a.peer), ("--python", a.python)):
        if not os.path.isfile(path):
            die(f"{what}: {path} not found")
    runs = run_rounds(a)
    text, med = table(a, runs)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv, "runs": {f"{at} {s}": v for (at, s), v in runs.items()},
                       "medians": {f"{at} {s}": v for (at, s), v in med.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
