"""A busy core for benchmarks on a shared machine: one Python process spinning in `while True: pass`
(it takes one core's worth of CPU, wherever the scheduler puts it), started before a measured run and
killed and reaped after it, so that an OpenMP team meets the contention a second program causes.

    with busy_core(True):        # or spinner = start(); ...; stop(spinner)
        subprocess.run(cmd)

Used by compare_pytorch.py --busy-core (around every run, ours and the peer's) and
test_bench_history.py; contention.py starts the same loop.
"""
import contextlib
import subprocess
import sys
import time

SPIN = "while True: pass"
SETTLE_S = 0.2  # let the spinner reach its loop before the measured run starts


def start(settle_s=SETTLE_S):
    """Starts the spinning process and returns its Popen; it runs until stop()."""
    p = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(settle_s)
    return p


def stop(p):
    """Kills and reaps the spinner (no zombie left); a no-op for None or a process already gone."""
    if p is None:
        return
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


@contextlib.contextmanager
def busy_core(on=True, settle_s=SETTLE_S):
    """A spinner for the body of the with-statement (none when on is false); it is stopped on every
    way out: normal end, an error, sys.exit or KeyboardInterrupt."""
    p = start(settle_s) if on else None
    try:
        yield p
    finally:
        stop(p)
