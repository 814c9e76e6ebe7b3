"""Runs longer than a sitting: their last train state, parked in the repository between sittings.

Run folders (runs/paper/<name>) are not committed, so a machine that starts afresh would lose every
run cut off at the end of a sitting and start it over. `reproduce.py park` copies what resuming
needs from each cut-off folder into results/runs/parked/<name>/, to be committed with the records:

    train_state.safetensors   weights, optimizer moments, EMA, step and RNG (what --resume reads)
    twin_state.pt             the same for a PyTorch twin run (results/torch_twin.py --resume)
    best.safetensors          the best weights so far (the trainer keeps the best across a resume)
    config.json               the resolved config (--resume refuses a different one)
    metrics.jsonl             the records so far (cut back to the state's step on resume)
    spent.json                the sittings so far (sweep points: their CPU adds up over sittings)

The states and weights (*.safetensors, *.pt) are parked gzip-compressed (<file>.gz) and unparked
back to the plain files, so a resumed run reads the same bytes; an uncompressed parked file (parked
before compression) is read as it is.

The next `sweep` or `run` unparks a folder before it decides whether to resume, so the run goes on
from the parked step, bit for bit as if it had never stopped (resume is byte-exact). A run that
ends with its record drops its parked copy. Stop the launcher first (SIGTERM: its trainers save
their state mid-epoch and exit, and it records their sittings), so the files are one consistent save.

What a parked state costs: dropping the copy does not take it out of the history, so every clone
carries every state ever parked. A train state of the study's models is about 2.3 MB (float32
weights, two Adam moments and the EMA), and float32 data hardly compresses (git saves about 9 % in its
pack). Counted with `git rev-list --objects --all` and `git cat-file --batch-check` at the end of
the study's sittings: 51 parked train states, 116 MiB uncompressed, 106 MiB of the 136 MiB pack,
and 26 parked best.safetensors another 19 MiB. So park a run only when it cannot finish in the
sitting, and park it once: a second parking of the same run adds its 2.3 MB again.
"""
import gzip
import json
import os
import shutil

import runner

FILES = ("train_state.safetensors", "best.safetensors", "config.json", "metrics.jsonl", "twin_state.pt")
STATES = ("train_state.safetensors", "twin_state.pt")  # sima-train's, or the PyTorch twin's (results/torch_twin.py)
SPENT = "spent.json"  # parked copy of runs/paper/<name>.spent.json


COMPRESSED = (".safetensors", ".pt")  # parked as <file>.gz


def has_state(d):
    return any(os.path.isfile(os.path.join(d, f)) or os.path.isfile(os.path.join(d, f + ".gz")) for f in STATES)


def copy_in(src, dst_dir, f):
    """Parks file src as dst_dir/f, gzip-compressed (f.gz) if it is a state or weights."""
    if f.endswith(COMPRESSED):
        with open(src, "rb") as a, gzip.open(os.path.join(dst_dir, f + ".gz"), "wb", compresslevel=6) as b:
            shutil.copyfileobj(a, b)
    else:
        shutil.copyfile(src, os.path.join(dst_dir, f))


def copy_out(src_dir, f, dst):
    """Unparks src_dir/f (or its f.gz) as the plain file dst; False if neither is parked."""
    if os.path.isfile(os.path.join(src_dir, f + ".gz")):
        with gzip.open(os.path.join(src_dir, f + ".gz"), "rb") as a, open(dst, "wb") as b:
            shutil.copyfileobj(a, b)
    elif os.path.isfile(os.path.join(src_dir, f)):
        shutil.copyfile(os.path.join(src_dir, f), dst)
    else:
        return False
    return True


def stored_epochs(out):
    """The epoch count in a run folder's config.json (sima-train's nests it, the twin's is flat:
    "train.epochs"), or None when there is no readable config."""
    try:
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        return cfg["train.epochs"] if "train.epochs" in cfg else cfg["train"]["epochs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_or_resume(records, out, epochs):
    """Readies run folder `out` for a sitting of a run of `epochs` epochs; returns True to resume. A run
    cut off in an earlier sitting (here, or parked in `records` from another machine) resumes when it
    has a state and planned the same epochs; anything else in `out` is cleared for a fresh start."""
    unpark(records, out)
    resume = has_state(out) and stored_epochs(out) == epochs
    if os.path.isdir(out) and not resume:
        shutil.rmtree(out)  # cut off before its first save, or planned otherwise
    os.makedirs(os.path.dirname(out), exist_ok=True)
    return resume


def parked_dir(records, out):
    return os.path.join(records, "parked", os.path.basename(os.path.normpath(out)))


def park(records, out_root, only=()):
    """Copies every cut-off run folder under out_root (a train state, no finished record), or only
    those named in `only`, into records/parked/; returns the names parked. A folder already parked
    is refreshed."""
    names = []
    for name in sorted(os.listdir(out_root)) if os.path.isdir(out_root) else []:
        out = os.path.join(out_root, name)
        if only and name not in only:
            continue
        if not has_state(out) or finished(out):
            continue
        dst = parked_dir(records, out)
        tmp = dst + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for f in FILES:
            if os.path.isfile(os.path.join(out, f)):
                copy_in(os.path.join(out, f), tmp, f)
        if os.path.isfile(out + ".spent.json"):
            shutil.copyfile(out + ".spent.json", os.path.join(tmp, SPENT))
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)  # never half a parked folder
        names.append(name)
    return names


def logged_epochs(d):
    """The epoch numbers of the epoch records in d/metrics.jsonl; [] when it is missing or unreadable."""
    try:
        return [r.get("epoch") for r in runner.epoch_records(d)]
    except (OSError, ValueError):
        return []


def progress(records, name):
    """(epochs logged, epochs planned) of the run parked as records/parked/<name>, or None when none is
    parked there; planned is None when its config cannot be read."""
    d = os.path.join(records, "parked", name)
    return (len(logged_epochs(d)), stored_epochs(d)) if has_state(d) else None


def finished(out):
    """The trainer has logged its last epoch (an epoch record with the config's epoch count)."""
    epochs = stored_epochs(out)
    return epochs is not None and epochs in logged_epochs(out)


def unpark(records, out):
    """Restores a parked run into out when out has no train state of its own; returns True if it did."""
    src = parked_dir(records, out)
    if has_state(out) or not has_state(src):
        return False
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in FILES:
        copy_out(src, f, os.path.join(out, f))
    if os.path.isfile(os.path.join(src, SPENT)):
        shutil.copyfile(os.path.join(src, SPENT), out + ".spent.json")
    return True


def drop(records, out):
    """The run has its record: its parked copy is no longer needed."""
    shutil.rmtree(parked_dir(records, out), ignore_errors=True)
