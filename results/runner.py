"""What every kind of run in results/reproduce.py shares: starting a program with its output to a log and
its CPU time measured, the command line a user would paste, the trainer's per-epoch records, and
records written atomically."""
import contextlib
import datetime
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SIMA_BIN_DIR", os.path.join(ROOT, "build", "bin"))  # e.g. a copy, to rebuild meanwhile
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from bench_record import cpu_info  # noqa: E402  (the CPU a sitting ran on: CPU seconds differ between hosts)


def write_json(p, rec):
    """Atomic: a killed run never leaves half a record."""
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = p + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def binary_version(bin_dir):
    """`sima-train --version` of the binaries the runs use (bin_dir): the version and the commit they
    were built from, which can differ from the checkout's `commit` (SIMA_BIN_DIR). None for a build
    older than the flag."""
    try:
        r = subprocess.run([os.path.join(bin_dir, "sima-train"), "--version"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def shell_line(argv):
    """The command as a user would type it from the repository root."""
    out = []
    for a in argv:
        if a.startswith(BIN + "/"):  # whatever SIMA_BIN_DIR was, the user's binaries are in build/bin
            a = "build/bin/" + os.path.basename(a)
        a = os.path.relpath(a, ROOT) if a.startswith(ROOT + "/") else a
        out.append("'%s'" % a if any(c in a for c in " {}\"$*") else a)
    return " ".join(out)


def user_command(argv, threads):
    """shell_line with the thread count the run had, so it can be pasted as is."""
    return "OMP_NUM_THREADS=%d " % threads + shell_line(argv)


# A launcher given SIGTERM or Ctrl-C (stop_on_sigterm) passes SIGTERM on to the trainers it runs: they
# save their train state and exit 130, their sittings are recorded as usual (out.spent.json), and no new
# row starts. Killing the launcher instead would lose the CPU of every sitting it was running. Children
# run in their own session, so a terminal's Ctrl-C reaches the launcher alone: an evaluation under way
# finishes and its record is written.
STOP = threading.Event()
INTERRUPTED = 130  # sima-train's and the twin's exit after SIGTERM / Ctrl-C, their train state saved
_trainers = {}  # pid -> Popen: the trainers running now
_trainers_lock = threading.RLock()  # reentrant: the handler may interrupt the main thread holding it


def stop_on_sigterm():
    def stop(signum, frame):
        STOP.set()
        with _trainers_lock:
            for p in list(_trainers.values()):
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def run_logged(argv, env, log_path, trainer=False):
    """Runs argv with stdout+stderr to log_path; returns (exit code, wall s, CPU s, last output line).
    CPU time (user + system of that child alone, from wait4) is the figure that survives a busy machine.
    A trainer is passed the launcher's SIGTERM (stop_on_sigterm); one stopped before it could set up
    its own handler is reported as interrupted too."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if trainer:
            with _trainers_lock:
                _trainers[p.pid] = p
            if STOP.is_set():  # the launcher was stopped while this one started
                p.send_signal(signal.SIGTERM)
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            with _trainers_lock:
                _trainers.pop(p.pid, None)
        p.returncode = os.waitstatus_to_exitcode(status)
    if trainer and STOP.is_set() and p.returncode == -signal.SIGTERM:
        p.returncode = INTERRUPTED
    wall = time.monotonic() - t0
    with open(log_path) as log:
        lines = [l.rstrip() for l in log if l.strip()]
    return p.returncode, wall, usage.ru_utime + usage.ru_stime, (lines[-1] if lines else "")


def diverged(last):
    """Whether a trainer's last output line is its stop for a non-finite value: a loss or gradient
    "not finite", or an update that "left a NaN or inf" (train/loop/loop_common.cpp)."""
    return any(w in last for w in ("not finite", "non-finite", "NaN or inf"))


def epoch_records(out_dir):
    recs = []
    path = os.path.join(out_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("kind") == "epoch":
                    recs.append(r)
    return recs


def scaler_state(out_dir):
    """A float16 run's loss scaler as its metrics log last saw it, {"step", "loss_scale",
    "overflow_skipped_steps"} (step and epoch records carry the two, train/loop/loop.cpp), or None for
    a run without a scaler. A run stopped mid-epoch is seen up to its last logged step. With it, when
    the log has them, PEAK_KEYS: the largest of every record's (the largest magnitude a forward pass
    rounded to float16, and within it the attention cores'; a run that diverged mid-epoch has them
    from its step records)."""
    last, peaks = None, {}
    path = os.path.join(out_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if "loss_scale" in r:
                    last = {k: r.get(k) for k in ("step", "loss_scale", "overflow_skipped_steps")}
                for k in PEAK_KEYS:
                    if r.get(k) is not None:
                        peaks[k] = max(peaks.get(k, 0.0), r[k])
    if last is not None:
        last.update(peaks)
    return last


# A float16 run's largest forward magnitudes, overall and in the attention cores' products (train/loop/loop.cpp).
PEAK_KEYS = ("fp16_forward_peak", "fp16_forward_peak_attention")


@contextlib.contextmanager
def claimed(out):
    """Yields True while this process holds the run folder `out` (an exclusive flock on out.claim),
    False when another launcher holds it: two `run` or `sweep` launchers given overlapping rows must
    not both train, resume or delete the same folder. The lock goes with the process, killed or not."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".claim", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def other_trainers():
    """The sima-train, sima-bench and sima-eval processes running now (pid, name), none of them ours:
    a timed row must have the machine to itself (called when this launcher has no child left). One
    paused with kill -STOP does not count: that is how other runs make room for the timing."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                name = f.read().strip()
            with open("/proc/%s/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if name in ("sima-train", "sima-bench", "sima-eval") and state not in ("T", "t", "Z"):
            found.append((int(pid), name))  # a stopped (kill -STOP) or finished process takes no CPU
    return found


def host():
    """{"cpu": its model name, "isa": the optional instruction sets it has (avx2, avx512f, ...)}: the same
    model name can be an AVX2-only or an AVX-512 host, and CPU seconds per epoch differ about 2x between them."""
    info = cpu_info()
    return {"cpu": info["model"], "isa": info["isa"]}


def run_sitting(argv, env, out, resume):
    """One sitting of a training run in folder `out`: runs argv (its log out.log, or out.resume.log),
    and appends the sitting to out.spent.json, which a fresh start resets: [{"wall_s", "cpu_s",
    "resumed", "load_before", "epochs_run", "threads", "cpu", "isa", "date" (its end, UTC)}...], so a run's CPU adds up over the sittings that
    ran it (`park` carries the file; stop the launcher with SIGTERM: a sitting killed outright is counted at
    resume from the trainer's per-epoch times, `lost_sitting`, without its start-up).
    Returns (exit code, last output line, the sittings so far)."""
    spent_path = out + ".spent.json"
    if not resume and os.path.exists(spent_path):
        os.remove(spent_path)
    load_before, epochs_before = os.getloadavg()[0], len(epoch_records(out))
    if resume:  # a sitting killed outright (SIGKILL, its session's end) left epochs no sitting counts
        before = json.load(open(spent_path)) if os.path.exists(spent_path) else []
        lost = lost_sitting(out, before, epochs_before)
        if lost:
            write_json(spent_path, before + [lost])
    code, wall, cpu, last = run_logged(argv, env, out + (".resume.log" if resume else ".log"), trainer=True)
    spent = json.load(open(spent_path)) if os.path.exists(spent_path) else []
    spent.append({"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "resumed": resume, "load_before": load_before,
                  "epochs_run": len(epoch_records(out)) - epochs_before, "threads": sitting_threads(env), **host(),
                  "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")})
    write_json(spent_path, spent)
    return code, last, spent


def sitting_threads(env):
    """The OpenMP threads a sitting ran with (its env's OMP_NUM_THREADS), or None when unset: sittings of
    one run may differ (a run resumed at 2 threads after a sitting at 1 trains on, but not bit for bit as a
    1-thread run would), so each sitting says its own."""
    try:
        return int(env.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None


def lost_sitting(out, spent, epochs_before, end=None):
    """The stand-in for a sitting that was killed outright (SIGKILL: the launcher ended with its session),
    so that out.spent.json never writes it: the epochs in out/metrics.jsonl beyond those the recorded
    sittings ran, timed by the trainer's own per-epoch figures (epoch_seconds, epoch_cpu_seconds; a lower
    bound: without start-up and the partial epoch cut off). Its host is unknown ("cpu": "unknown") and its
    date is the train state's last save (or `end`, a Unix time). None when every epoch is counted, when
    an older sitting does not say how many epochs it ran, or when the epochs carry no CPU figures."""
    if any("epochs_run" not in s for s in spent):
        return None
    lost = epoch_records(out)[sum(s["epochs_run"] for s in spent):epochs_before]
    if not lost or any("epoch_cpu_seconds" not in e for e in lost):
        return None
    state = os.path.join(out, "train_state.safetensors")
    if end is None:
        end = os.path.getmtime(state) if os.path.exists(state) else time.time()
    return {"wall_s": round(sum(e.get("epoch_seconds", 0.0) for e in lost), 1),
            "cpu_s": round(sum(e["epoch_cpu_seconds"] for e in lost), 1), "resumed": bool(spent),
            "load_before": None, "epochs_run": len(lost), "cpu": "unknown", "isa": [],
            "reconstructed": "killed before it could record itself: the trainer's per-epoch times",
            "date": datetime.datetime.utcfromtimestamp(end).strftime("%Y-%m-%d %H:%M UTC")}


def spent_totals(spent):
    """{"sittings", "wall_s", "cpu_s"} of a run's sittings, for its record."""
    return {"sittings": spent, "wall_s": round(sum(x["wall_s"] for x in spent), 1),
            "cpu_s": round(sum(x["cpu_s"] for x in spent), 1)}
