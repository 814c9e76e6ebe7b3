#!/usr/bin/env python3
"""Kill/resume soak test of sima-train (long: not part of ctest; run it by hand).

For each job - a DINO run (one process) and a supervised run (2 MPI ranks under mpirun when
the build has SIMA_MPI and mpirun is installed, else one process) - it trains once without
interruption (the reference), then trains the same run again while sending SIGKILL to the
whole process group at random moments and resuming with --resume each time, N kills in all
(default 100 per job). When a run finishes before the N kills, it is compared and a new
round starts in a fresh folder. Every finished round is compared byte for byte with the
reference: every *.safetensors file (model, best, EMA, student, train_state) and
metrics.jsonl without its timing fields (img_per_s, epoch_seconds, epoch_cpu_seconds, eval_img_per_s).
Checkpoints are written after every step, so many kills land inside a save.

    tests/soak/kill_resume.py [--kills 100] [--bin build/bin] [--jobs dino,supervised]
                              [--max-delay SECONDS] [--seed 0] [--work DIR] [--no-mpi]

Exit status 0 when every round matched and every resume started (no stale lock, no
corrupt file), 1 otherwise. Threads are fixed (OMP_NUM_THREADS=1 per process), as resume
is bit-exact only at a fixed thread count.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMING_KEYS = {"img_per_s", "epoch_seconds", "epoch_cpu_seconds", "eval_img_per_s"}

MODEL = {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 2, "num_heads": 2}

CONFIGS = {
    # DINO: 2 global + 2 local crops, a small head; 4 epochs of 8 steps.
    "dino": {
        "name": "soak_dino",
        "model": MODEL,
        "data": {"train_subset": 256, "batch_size": 32, "num_workers": 0},
        "schedule": {"warmup_epochs": 1},
        "train": {"epochs": 4, "log_every": 1, "checkpoint_every": 1},
        "dino": {"enabled": True, "out_dim": 256, "hidden_dim": 64, "bottleneck_dim": 32,
                 "local_crops_number": 2, "local_crops_size": 16, "freeze_last_layer": 1},
    },
    # Supervised with EMA and mixup (more state to restore); 4 epochs of 16 global steps.
    "supervised": {
        "name": "soak_supervised",
        "model": MODEL,
        "data": {"train_subset": 512, "test_subset": 64, "batch_size": 16, "num_workers": 0},
        "schedule": {"warmup_epochs": 1},
        "mixup": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0},
        "train": {"epochs": 4, "log_every": 1, "checkpoint_every": 1, "eval_every": 1, "ema": True},
    },
}


def has_mpi(bin_dir):
    cache = os.path.join(bin_dir, "..", "CMakeCache.txt")
    try:
        with open(cache) as f:
            built = any(line.strip() == "SIMA_MPI:BOOL=ON" for line in f)
    except OSError:
        built = False
    return built and shutil.which("mpirun") is not None


class Job:
    def __init__(self, name, bin_dir, work, ranks):
        self.name, self.ranks = name, ranks
        self.train = os.path.join(bin_dir, "sima-train")
        self.config = os.path.join(work, name + ".json")
        with open(self.config, "w") as f:
            json.dump(CONFIGS[name], f)
        self.env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive",
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", SIMA_MPI_TIMEOUT="60")

    def command(self, out, resume):
        args = [self.train, "--out", out, "--quiet"] + (["--resume"] if resume else ["--config", self.config])
        if self.ranks > 1:
            return ["mpirun", "-np", str(self.ranks), "--oversubscribe", "--bind-to", "none"] + args
        return args

    def start(self, out, resume, log):
        return subprocess.Popen(self.command(out, resume), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own process group: mpirun and every rank


def session_processes(sid):
    """Pids of every process in session `sid` (mpirun puts its ranks in process groups of their
    own, but they stay in the session the soak started)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            pids.append(int(d))
    return pids


def kill_group(proc):
    """SIGKILL to every process of the run (mpirun and all its ranks at once, as a crash of the
    machine would), then wait until none is left."""
    for _ in range(2000):
        pids = session_processes(proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.wait()
        if not pids:
            return
        time.sleep(0.005)
    raise RuntimeError("processes of session %d survived SIGKILL" % proc.pid)


def metrics_without_timing(path):
    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            rows.append({k: v for k, v in r.items() if k not in TIMING_KEYS})
    return rows


def compare(ref, got):
    """The differences between two run folders (empty list: identical)."""
    diffs = []
    files = sorted(n for n in os.listdir(ref) if n.endswith(".safetensors"))
    if files != sorted(n for n in os.listdir(got) if n.endswith(".safetensors")):
        diffs.append("different checkpoint files: %s vs %s" % (files, sorted(os.listdir(got))))
    for n in files:
        p = os.path.join(got, n)
        if not os.path.exists(p):
            continue
        with open(os.path.join(ref, n), "rb") as a, open(p, "rb") as b:
            if a.read() != b.read():
                diffs.append(n + " differs")
    a, b = metrics_without_timing(os.path.join(ref, "metrics.jsonl")), metrics_without_timing(
        os.path.join(got, "metrics.jsonl"))
    if a != b:
        first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        diffs.append("metrics.jsonl differs (%d vs %d records; first at record %d)" % (len(a), len(b), first))
    return diffs


def soak(job, work, kills_wanted, max_delay, rng):
    ref = os.path.join(work, job.name + "_reference")
    with open(ref + ".log", "w") as log:
        t0 = time.time()
        rc = job.start(ref, False, log).wait()
    if rc != 0:
        print("%s: the reference run failed (exit %d), see %s.log" % (job.name, rc, ref))
        return {"kills": 0, "early_kills": 0, "kills_after_progress": 0, "resumes": 0, "rounds": 0,
                "mismatches": 1, "failures": 1}
    ref_seconds = time.time() - t0
    max_delay = max_delay or 0.5 * ref_seconds
    print("%s: reference run %.1f s (%s); kills after 0.05..%.2f s" % (
        job.name, ref_seconds, " ".join(job.command(ref, False)), max_delay), flush=True)
    stats = {"kills": 0, "early_kills": 0, "kills_after_progress": 0, "resumes": 0, "rounds": 0,
             "mismatches": 0, "failures": 0}
    while stats["kills"] < kills_wanted and stats["failures"] == 0:
        out = os.path.join(work, "%s_round%d" % (job.name, stats["rounds"]))
        resume = False
        log_path = out + ".log"
        with open(log_path, "w") as log:
            while True:
                state = os.path.join(out, "train_state.safetensors")
                before = os.stat(state).st_mtime_ns if os.path.exists(state) else None
                proc = job.start(out, resume, log)
                stats["resumes"] += resume
                if stats["kills"] < kills_wanted:
                    try:
                        rc = proc.wait(timeout=rng.uniform(0.05, max_delay))
                    except subprocess.TimeoutExpired:
                        kill_group(proc)
                        stats["kills"] += 1
                        # the attempt saved at least one new state before it was killed
                        stats["kills_after_progress"] += os.path.exists(state) and os.stat(state).st_mtime_ns != before
                        resume = os.path.exists(os.path.join(out, "train_state.safetensors"))
                        if not resume:  # killed before its first save: start again from scratch
                            stats["early_kills"] += 1
                            shutil.rmtree(out, ignore_errors=True)
                        continue
                else:
                    rc = proc.wait()
                if rc != 0:
                    print("%s: round %d: a run exited %d (see %s)" % (job.name, stats["rounds"], rc, log_path))
                    stats["failures"] += 1
                break
        if stats["failures"]:
            break
        diffs = compare(ref, out)
        stats["rounds"] += 1
        if diffs:
            stats["mismatches"] += 1
            print("%s: round %d MISMATCH: %s" % (job.name, stats["rounds"], "; ".join(diffs)))
        else:
            shutil.rmtree(out, ignore_errors=True)
        print("%s: round %d done: %d kills, %d resumes so far, %s" % (
            job.name, stats["rounds"], stats["kills"], stats["resumes"], "mismatch" if diffs else "identical"),
              flush=True)
    return stats


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=100, help="SIGKILLs per job (default 100)")
    ap.add_argument("--bin", default=os.path.join(here, "..", "..", "build", "bin"), help="folder of sima-train")
    ap.add_argument("--jobs", default="dino,supervised")
    ap.add_argument("--max-delay", type=float, default=0.0,
                    help="longest wait before a kill, seconds (default: 0.5 x the job's reference run time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="", help="folder for the runs (default: a temporary one, removed on success)")
    ap.add_argument("--no-mpi", action="store_true", help="the supervised job in one process even with MPI")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = a.work or tempfile.mkdtemp(prefix="sima_soak_")
    os.makedirs(work, exist_ok=True)
    mpi = has_mpi(a.bin) and not a.no_mpi
    print("soak: %d kills per job, work folder %s, supervised job %s" % (
        a.kills, work, "on 2 MPI ranks" if mpi else "in one process (no MPI)"), flush=True)
    ok = True
    for name in a.jobs.split(","):
        job = Job(name, a.bin, work, 2 if (name == "supervised" and mpi) else 1)
        t0 = time.time()
        s = soak(job, work, a.kills, a.max_delay, rng)
        print("%s: %d kills (%d before the run's first save, %d after the attempt saved progress), %d resumes, "
              "%d rounds compared, %d mismatches, %d failed runs, %.0f s" % (
                  name, s["kills"], s["early_kills"], s["kills_after_progress"], s["resumes"], s["rounds"],
                  s["mismatches"], s["failures"], time.time() - t0), flush=True)
        ok = ok and s["mismatches"] == 0 and s["failures"] == 0
    if ok and not a.work:
        shutil.rmtree(work, ignore_errors=True)
    print("soak: " + ("PASS" if ok else "FAIL (runs kept in %s)" % work))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
