"""The bench history's record: what compare_pytorch.py --record writes (one JSON file per invocation)
and bench_history.py reads back into docs/bench_history.md, with the table rows that --csv writes.

A record (schema 1):
  commit, commit_dirty      `git rev-parse --short HEAD`, and whether tracked files had changes
  date                      UTC, ISO 8601 ("2026-11-26T05:15:00Z"): when the comparison started
  cpu {model, isa}          /proc/cpuinfo's first "model name", and which of ISA_FLAGS it lists
  threads, precision, busy_core, rounds, batch, cores
  load_average_start/_end   os.getloadavg() (1, 5, 15 minutes) before the first and after the last run
  results[]                 per case and attention: medians {ours, torch, torch_int8} (the keys of
                            sima-bench --json and of the peers) and ratios (ours / torch, RATIO_KEYS)
"""
import datetime
import json
import os
import subprocess
import tempfile

SCHEMA = 1
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")
# ratio name -> (ours' key, peer side, peer's key); > 1 is better for img/s, worse for ms and MiB.
RATIOS = {
    "train": ("train_img_per_s", "torch", "train_img_s"),
    "infer_b64": ("infer_img_per_s", "torch", "infer_img_s"),
    "latency_b1": ("latency_b1_ms", "torch", "latency_b1_ms"),
    "peak_rss": ("peak_rss_mb", "torch", "peak_rss_mb"),
    "int8_infer_b64": ("infer_img_per_s", "torch_int8", "infer_img_s"),
    "int8_latency_b1": ("latency_b1_ms", "torch_int8", "latency_b1_ms"),
}
REQUIRED = ("schema", "commit", "date", "cpu.model", "cpu.isa", "threads", "precision", "busy_core", "rounds",
            "load_average_start", "results")
REQUIRED_RESULT = ("case", "attn", "medians.ours", "medians.torch", "medians.torch_int8") + tuple(
    "ratios." + k for k in RATIOS)
# The CSV columns (--csv): one row per case and attention, the columns of the printed tables.
CSV_COLUMNS = ("case", "attn", "threads", "precision", "busy_core",
               "ours_train_img_s", "torch_train_img_s", "ratio_train",
               "ours_infer_img_s", "torch_infer_img_s", "ratio_infer_b64",
               "ours_b1_ms", "torch_b1_ms", "ratio_latency_b1",
               "ours_rss_mib", "torch_rss_mib", "ratio_peak_rss", "sgemm_peak_pct",
               "torch_int8_infer_img_s", "ratio_int8_infer_b64", "torch_int8_b1_ms", "ratio_int8_latency_b1",
               "infer_sgemm_peak_pct")


def ratio(x, y):
    """x / y, or None when either is missing or y is 0."""
    return None if x is None or y is None or y == 0 else x / y


def ratios(m):
    """The RATIOS of one case and attention from its medians {ours, torch, torch_int8}."""
    return {k: ratio(m["ours"].get(ok), m[side].get(pk)) for k, (ok, side, pk) in RATIOS.items()}


def csv_row(case, attn, m, threads, precision, busy):
    o, t, q, r = m["ours"], m["torch"], m["torch_int8"], ratios(m)
    frac, ifrac = o.get("fraction_of_sgemm_peak"), o.get("infer_fraction_of_sgemm_peak")
    vals = (case, attn, threads, precision, int(busy),
            o.get("train_img_per_s"), t.get("train_img_s"), r["train"],
            o.get("infer_img_per_s"), t.get("infer_img_s"), r["infer_b64"],
            o.get("latency_b1_ms"), t.get("latency_b1_ms"), r["latency_b1"],
            o.get("peak_rss_mb"), t.get("peak_rss_mb"), r["peak_rss"], None if frac is None else 100 * frac,
            q.get("infer_img_s"), r["int8_infer_b64"], q.get("latency_b1_ms"), r["int8_latency_b1"],
            None if ifrac is None else 100 * ifrac)
    return dict(zip(CSV_COLUMNS, vals))


def cpu_info(path="/proc/cpuinfo"):
    """{model, isa}: the first "model name" ("unknown" without one) and the ISA_FLAGS it lists."""
    model, flags = "unknown", set()
    try:
        with open(path) as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = val.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    return {"model": model, "isa": [f for f in ISA_FLAGS if f in flags]}


def git_commit(root):
    """(short hash or "unknown", whether tracked files differ from it)."""
    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    try:
        head, status = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    if head.returncode != 0:
        return "unknown", False
    return head.stdout.strip(), bool(status.stdout.strip())


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def write_atomic(directory, started, record):
    """Writes record to directory/<started as 20261126T051500Z>.json through a temporary file and a
    rename (a reader never sees half a record); a second record in the same second gets -2, -3, ..."""
    os.makedirs(directory, exist_ok=True)
    stem = started.strftime("%Y%m%dT%H%M%SZ")
    fd, tmp = tempfile.mkstemp(prefix="." + stem, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        for n in range(1, 1000):
            path = os.path.join(directory, stem + ("" if n == 1 else f"-{n}") + ".json")
            try:
                os.link(tmp, path)  # fails if the name is taken: never overwrites a record
                return path
            except FileExistsError:
                continue
        raise OSError(f"no free record name for {stem} in {directory}")
    finally:
        os.unlink(tmp)


def lookup(d, dotted):
    """d["a"]["b"] for "a.b"; KeyError(dotted) when a part is missing."""
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            raise KeyError(dotted)
        d = d[part]
    return d


def check(record, where):
    """Raises ValueError("<where>: ...") naming the first missing key or wrong value of a record."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a record is a JSON object, got {type(record).__name__}")
    for key in REQUIRED:
        try:
            lookup(record, key)
        except KeyError:
            raise ValueError(f"{where}: missing key '{key}' (a record has: {', '.join(REQUIRED)})") from None
    if record["schema"] != SCHEMA:
        raise ValueError(f"{where}: schema {record['schema']!r}, this reader knows schema {SCHEMA}")
    try:
        datetime.datetime.strptime(str(record["date"]), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise ValueError(f"{where}: 'date' must be UTC like 2026-11-26T05:15:00Z, got {record['date']!r}") from None
    if not isinstance(record["results"], list) or not record["results"]:
        raise ValueError(f"{where}: 'results' must be a non-empty list")
    for i, res in enumerate(record["results"]):
        for key in REQUIRED_RESULT:
            try:
                val = lookup(res, key)
            except KeyError:
                raise ValueError(f"{where}: missing key 'results[{i}].{key}'") from None
            if key.startswith("ratios.") and val is not None and not isinstance(val, (int, float)):
                raise ValueError(f"{where}: 'results[{i}].{key}' must be a number or null, got {val!r}")
