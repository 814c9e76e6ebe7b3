"""Batch-1 CPU latency of claim 5's DeiT, one row per attention: the row `bench_latency_claim5`.

Each round runs `sima-bench model --batch 1` once per claim-5 config (its `model` object, the whole
DeiT with its attention and options, at 28 px), 2 threads, the attentions in the table's order in
even rounds and reversed in odd ones, so that a slow minute of the machine does not fall on one
attention; sima-bench's own figure is the median of --reps forward passes at batch 1
(`latency_b1_ms`). The record keeps every round's figure and, per row, their median:

    {"bench": [{"row": "deit_sima", "variant": "sima", "latency_b1_ms": median, "round_ms": [...]}, ...]}

Run it alone on the machine (`reproduce.py run --rows bench_latency_claim5`: the speed rows run last,
one at a time)."""
import json
import os
import statistics

import report_claims
from runner import run_logged, shell_line

ROW = "bench_latency_claim5"
ROUNDS = 5
REPS = 51
# Claim 5's DeiT configs, in its table's order (one list: results/report_claims.py CLAIM5).
CONFIGS = tuple(row for row, _ in report_claims.CLAIM5)


def model_json(root, row):
    """The `model` object of configs/paper/<row>.json, compact, as sima-bench --model takes it."""
    with open(os.path.join(root, "configs", "paper", row + ".json")) as f:
        return json.dumps(json.load(f)["model"], separators=(",", ":"), sort_keys=True)


def argv(bin_dir, root, row):
    return [os.path.join(bin_dir, "sima-bench"), "model", "--model", model_json(root, row), "--batch", "1",
            "--reps", str(REPS), "--json"]


def order(round_index):
    return CONFIGS if round_index % 2 == 0 else tuple(reversed(CONFIGS))


def run(bin_dir, root, out, env):
    """Runs the rounds; returns the record's fields (bench rows, command, wall and CPU seconds)."""
    env = dict(env, OMP_NUM_THREADS="2")
    os.makedirs(out, exist_ok=True)
    example = argv(bin_dir, root, CONFIGS[1])
    rec = {"command": "OMP_NUM_THREADS=2 " + shell_line(example) + "  (each row: its config's model object)",
           "rounds": ROUNDS, "reps": REPS, "wall_s": 0.0, "cpu_s": 0.0, "exit_code": 0}
    ms = {row: [] for row in CONFIGS}
    variant = {}
    for i in range(ROUNDS):
        for row in order(i):
            log = os.path.join(out, "%s_round%d.jsonl" % (row, i))
            code, wall, cpu, last = run_logged(argv(bin_dir, root, row), env, log)
            rec["wall_s"], rec["cpu_s"] = round(rec["wall_s"] + wall, 1), round(rec["cpu_s"] + cpu, 1)
            if code != 0:
                rec.update(exit_code=code, error="%s: %s" % (row, last))
                return rec
            with open(log) as f:
                got = [json.loads(l) for l in f if l.startswith("{")][-1]
            ms[row].append(got["latency_b1_ms"])
            variant[row] = json.loads(got["model"]).get("attention", {}).get("type", "?")
    rec["bench"] = [{"row": row, "variant": variant[row], "batch": 1, "threads": 2,
                     "latency_b1_ms": statistics.median(ms[row]), "round_ms": ms[row]} for row in CONFIGS]
    return rec
