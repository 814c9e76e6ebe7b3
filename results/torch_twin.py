#!/usr/bin/python3
"""PyTorch twin of `sima-train` for the CvT recipe of configs/paper/cvt_sima.json.

The same model, data and recipe trained by PyTorch (Debian's python3-torch) instead of sima.cpp,
to show that the framework reaches the same accuracy at convergence and to time it against a
mainstream framework. The command line mirrors sima-train's:

  /usr/bin/python3 results/torch_twin.py --config configs/paper/cvt_sima.json \\
      --set train.seed=0 --out runs/twin/cvt_sima_s0 [--threads 1] [--quiet] [--smoke]

It writes DIR/metrics.jsonl (sima-train's "epoch" records: epoch, step, train_loss, lr,
epoch_seconds, test_* or val_* loss/top1/top5, eval_img_per_s, best_top1; "step" records every
train.log_every steps), DIR/config.json (every key with the value used) and DIR/result.json, and
prints the result as its last line: {"twin": "pytorch", "top1", "set", "wall_s", "cpu_s",
"threads", "parameters", ...}. --smoke: 256 training and 128 test images, 1 epoch, batch 64
(results/reproduce.py's smoke budget). Exit code 1 with "error: ..." on a refused config or a
non-finite loss. `run(config_path, sets, out_dir, threads)` does the same from Python.
Stopping and resuming, as sima-train: the run saves DIR/twin_state.pt (weights, BatchNorm statistics,
AdamW's moments, torch's RNG, where it stands, each sitting's time) after every epoch and, on SIGTERM
or Ctrl-C, at the step it reached, then exits 130; `--resume` goes on from it with the same config,
and the finished run is the uninterrupted one (tests/results/torch_twin_smoke.sh); its wall_s and
cpu_s add up the sittings.
Two checks against sima.cpp (both in tests/results/torch_twin_smoke.sh):
  --eval-checkpoint FILE  evaluates a sima-train model.safetensors on the images the config
                          selects: sima-train's top-1 and loss (the model, the data indices and
                          the evaluation transform are the same);
  --init-from FILE        trains from a sima-train checkpoint's weights (BatchNorm statistics
                          reset) instead of a seeded init: with drop path 0 the step losses and
                          gradient norms are sima-train's until float rounding drifts apart.

The config is the one `sima-train --check` resolves from the same --config and --set, every key
and the peak lr (results/twin_config.py, which also says which keys the twin implements: a key it
does not implement must keep sima.cpp's default, else the twin refuses the config naming the key;
it never trains another recipe). The binaries are SIMA_BIN_DIR's, else build/bin.

Matched exactly (same definitions as sima.cpp):
  - the model, layer for layer (tests/bench/cvt_peer.py: CvT, conv projections + BatchNorm,
    SimA or softmax core, QuickGELU MLP, cls token in the last stage, same parameter names and
    count: 565,642, as `sima-bench model` reports), drop path per block linspace(0, rate, depth);
  - the init distributions (models/cvt.cpp): Linear weights and cls_token trunc_normal(std .02,
    [-2, 2]), Linear biases 0 (the head's bias keeps U(+-1/sqrt(fan_in))), Conv2d kaiming_uniform
    (a = sqrt 5) and U(+-1/sqrt(fan_in)) bias, LayerNorm and BatchNorm weight 1 bias 0;
  - the data: Fashion-MNIST from /usr/share/datasets/fashion-mnist, pixels / 255, and sima.cpp's
    random draws (results/sima_rng.py ports its generator and loader): the same training subset,
    evaluation subset and validation split, the same batches in the same order (drop_last), the
    same crop offsets and flips for every image;
  - augmentation (train/config/transforms_factory.cpp): zero padding, the crop back to 28x28, the horizontal
    flip, then normalisation with the model's mean/std (0.2860, 0.3530); evaluation:
    normalisation only (28x28 images pass the evaluation resize untouched);
  - AdamW (PyTorch's update, decoupled decay p *= 1 - lr*wd) with lr, betas, eps and weight
    decay from the config, no decay on 1-D parameters and on names in optimizer.no_weight_decay
    (train/optim/optim.cpp's is_no_decay_name); the peak lr sima-train computes (--check --derived);
  - the per-step schedule (train/optim/schedule.cpp): linear warmup from warmup_lr over
    round(warmup_epochs * steps_per_epoch) steps, then cosine to min_lr at the last step;
  - label-smoothed cross-entropy, BatchNorm batch statistics in training and running statistics
    in evaluation, evaluation every eval_every epochs and after the last, its loss unsmoothed.
Not matched: the initial weights and the drop-path masks are drawn by torch.manual_seed(seed),
not by sima.cpp's generators (same distributions, other values), so a seed's twin run is an
independent draw of the same experiment and agreement is judged on the spread over seeds. The
float summation order differs (OpenBLAS vs PyTorch kernels), so even from the same weights the
runs drift apart after some steps. data.num_workers does not apply (one process). The per-image
draws run in Python and count in the twin's CPU time (measured ~9 us an image, ~1 ms a batch).
"""
import argparse
import gzip
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from cvt_peer import CvT  # noqa: E402  (the quickstart CvT, layer for layer as models/cvt.cpp)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sima_rng  # noqa: E402  (sima.cpp's data streams: subsets, split, batch order, crops, flips)
from twin_config import LR, ConfigError, load_config  # noqa: E402,F401  (the config, as sima-train resolves it)

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
SMOKE_SETS = ["data.train_subset=256", "data.test_subset=128", "train.epochs=1", "data.batch_size=64"]


# ---- data -------------------------------------------------------------------------------------

def load_fashion_mnist(split):  # -> uint8 images (N, 1, 28, 28), int64 labels (N,)
    prefix = os.path.join(FASHION_MNIST, "train" if split == "train" else "t10k")
    with gzip.open(prefix + "-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(prefix + "-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def datasets(c):
    """(train images, train labels, eval images, eval labels, "test" | "val"), as sima.cpp picks them."""
    xtr, ytr = load_fashion_mnist("train")
    train_idx = list(range(len(xtr)))
    if c["data.validation"] > 0:  # the held-out split replaces the test set, which is never read
        if not 0 < c["data.validation"] < len(xtr):
            raise ConfigError(f"data.validation: {c['data.validation']} must be in [1, {len(xtr) - 1}]")
        train_idx, eval_idx = sima_rng.holdout_split(len(xtr), c["data.validation"], c["data.validation_seed"])
        xte, yte, which = xtr, ytr, "val"
    else:
        xte, yte = load_fashion_mnist("test")
        eval_idx, which = list(range(len(xte))), "test"
    train_idx = sima_rng.random_subset(train_idx, c["data.train_subset"], c["train.seed"])
    eval_idx = sima_rng.random_subset(eval_idx, c["data.test_subset"], c["train.seed"] + 1)
    tr, ev = torch.tensor(train_idx), torch.tensor(eval_idx)
    return xtr[tr], ytr[tr], xte[ev], yte[ev], which


def normalise(x, c):  # uint8 or [0, 1] float (B, 1, 28, 28) -> (x - mean) / std
    return (x.float() / 255.0 - c["model.mean"][0]) / c["model.std"][0] if x.dtype == torch.uint8 else \
        (x - c["model.mean"][0]) / c["model.std"][0]


def augment(x, c, epoch, idx):
    """sima.cpp's train transform of training samples idx (positions in the training set) in
    epoch `epoch`: zero padding, the crop back to 28x28, the horizontal flip, normalisation; the
    offsets and flips are the ones sima.cpp draws for these samples (sima_rng.crop_flip_draws)."""
    B, H, W, p = x.shape[0], x.shape[2], x.shape[3], c["augment.padding"]
    draws = [sima_rng.crop_flip_draws(c["train.seed"], epoch, i, p, c["augment.hflip"]) for i in idx.tolist()]
    top, left, flip = (torch.tensor(v) for v in zip(*draws))
    x = F.pad(x.float() / 255.0, (p, p, p, p))
    rows = (top[:, None] + torch.arange(H))[:, :, None]   # (B, H, 1)
    cols = (left[:, None] + torch.arange(W))[:, None, :]  # (B, 1, W)
    x = x[torch.arange(B)[:, None, None], 0, rows, cols].unsqueeze(1)  # (B, 1, H, W)
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    return normalise(x, c)


# ---- model, optimizer, schedule ---------------------------------------------------------------

def build_model(c):
    return CvT(c["model.attention.type"], dims=tuple(c["model.stage_dims"]), depths=tuple(c["model.stage_depths"]),
               heads=tuple(c["model.stage_heads"]), drop_path=tuple(float(r) for r in c["model.stage_drop_path"]))


def is_no_decay_name(name, names):  # train/optim/optim.cpp: a dot-separated component, or a suffix
    for n in filter(None, names):
        pos = name.find(n)
        while pos >= 0:
            end = pos + len(n)
            if (pos == 0 or name[pos - 1] == ".") and (end == len(name) or name[end] == "."):
                return True
            pos = name.find(n, pos + 1)
        if name.endswith(n):
            return True
    return False


def param_groups(model, c):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.dim() <= 1 or is_no_decay_name(name, c["optimizer.no_weight_decay"]) else decay).append(p)
    return [{"params": decay, "weight_decay": c["optimizer.weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_at(step, c, warmup, total):  # train/optim/schedule.cpp's cosine with linear warmup
    base, t = c[LR], min(step, total)
    if t < warmup:
        return c["schedule.warmup_lr"] + (base - c["schedule.warmup_lr"]) * t / warmup
    progress = (t - warmup) / (total - warmup) if total > warmup else 1.0
    return c["schedule.min_lr"] + 0.5 * (base - c["schedule.min_lr"]) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model, x, y, c):  # -> loss (no smoothing), top-1 %, top-5 %, images/s
    model.eval()
    t0, loss, top1, top5 = time.monotonic(), 0.0, 0, 0
    for i in range(0, len(x), c["data.eval_batch_size"]):
        xb, yb = normalise(x[i:i + c["data.eval_batch_size"]], c), y[i:i + c["data.eval_batch_size"]]
        logits = model(xb)
        loss += F.cross_entropy(logits, yb, reduction="sum").item()
        best = logits.topk(5, 1).indices
        top1 += (best[:, 0] == yb).sum().item()
        top5 += (best == yb[:, None]).any(1).sum().item()
    n = len(x)
    return loss / n, 100.0 * top1 / n, 100.0 * top5 / n, n / max(time.monotonic() - t0, 1e-9)


def load_safetensors(path, model):
    """sima.cpp's checkpoint (models/io/safetensors.h: F32 tensors, the names of cvt_peer's state
    dict) into `model`, strictly: a missing, extra or misshapen tensor is an error."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header, data = json.loads(f.read(n)), f.read()
    state = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise ConfigError(f"{path}: tensor {name} is {t['dtype']}, expected F32")
        a, b = t["data_offsets"]
        v = torch.from_numpy(np.frombuffer(data[a:b], np.float32).copy()).reshape(t["shape"])
        state[name] = v.long() if name.endswith("num_batches_tracked") else v
    model.load_state_dict(state, strict=True)


def eval_checkpoint(c, path):
    """The twin's evaluation of sima.cpp's trained weights on the config's evaluation images."""
    _, _, xev, yev, which = datasets(c)
    model = build_model(c)
    load_safetensors(path, model)
    loss, top1, top5, _ = evaluate(model, xev, yev, c)
    return {"twin": "pytorch", "checkpoint": path, "set": which, "images": len(xev), "loss": loss, "top1": top1,
            "top5": top5}


# ---- the run ----------------------------------------------------------------------------------

def train_epoch(model, opt, c, data, epoch, step, sched, metrics, first=0, loss_sum=0.0, stop_at=None):
    """One epoch of sima-train's loop from batch `first` (a resumed epoch): per step the scheduled
    lr, the label-smoothed loss of the augmented batch, backward, AdamW. Returns (steps done, loss
    sum over the epoch's batches so far, last lr, batches done); stops early, at a step boundary,
    once STOP is set (SIGTERM) or at step `stop_at` (tests), with fewer than steps_per_epoch batches done."""
    xtr, ytr = data
    B, steps_per_epoch = c["data.batch_size"], len(xtr) // c["data.batch_size"]
    order = torch.tensor(sima_rng.epoch_order(len(xtr), c["train.seed"], epoch))  # sima.cpp's batches
    model.train()
    window, lr = [], sched(step)
    for b in range(first, steps_per_epoch):
        if STOP or step == stop_at:
            return step, loss_sum, lr, b
        idx = order[b * B:(b + 1) * B]
        lr = sched(step)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = F.cross_entropy(model(augment(xtr[idx], c, epoch, idx)), ytr[idx],
                               label_smoothing=c["train.label_smoothing"])
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(f"the loss is not finite ({value}) at step {step + 1}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        loss_sum += value
        window.append(value)
        if step % c["train.log_every"] == 0:
            grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
            metrics.write(json.dumps({"kind": "step", "step": step, "epoch": step / steps_per_epoch,
                                      "loss": sum(window) / len(window), "lr": lr, "grad_norm": grad_norm,
                                      "weight_decay": c["optimizer.weight_decay"]}) + "\n")
            window = []
    return step, loss_sum, lr, steps_per_epoch


STATE = "twin_state.pt"  # the run's state at a step boundary: what --resume reads
STOP = False  # set by SIGTERM / Ctrl-C: the run saves its state at the next step boundary and exits 130


def on_stop(signum, frame):
    global STOP
    STOP = True


def save_state(out_dir, model, opt, at, sitting):
    """Atomically writes the run's state: weights and BatchNorm statistics, AdamW's moments, torch's
    RNG (drop path), where the run stands and the CPU/wall time of every sitting so far."""
    st = {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state(), **at,
          "sittings": at["sittings"] + [sitting()]}
    tmp = os.path.join(out_dir, STATE + ".tmp")
    torch.save(st, tmp)
    os.replace(tmp, os.path.join(out_dir, STATE))


def keep_metrics(path, step, epochs):
    """A resumed run's metrics.jsonl cut back to what its state had done: step records up to `step`,
    epoch records up to `epochs` (a killed sitting may have written more after its last save)."""
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    keep = [r for r in recs if (r["kind"] == "step" and r["step"] <= step) or
            (r["kind"] == "epoch" and r["epoch"] <= epochs)]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in keep)


def resume_state(out_dir, model, opt, metrics_path):
    """Loads out_dir's saved state into model, opt and torch's generator, cuts metrics.jsonl back to
    it, and returns where training stood (train()'s `at`)."""
    st = torch.load(os.path.join(out_dir, STATE))
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["optimizer"])
    torch.set_rng_state(st["rng"])
    at = {k: st[k] for k in ("epoch", "batch", "loss_sum", "step", "best", "last", "sittings")}
    keep_metrics(metrics_path, at["step"], at["epoch"])
    return at


def train(c, out_dir, log, init_from=None, resume=False, sitting=lambda: {}, stop_at=None):
    """Trains as sima-train would; writes out_dir/metrics.jsonl; returns the result fields, with
    "stopped": True when SIGTERM stopped it (its state saved). init_from: start from these weights (a
    sima-train checkpoint) instead of a seeded init; resume: go on from out_dir's saved state.
    sitting(): this sitting's {"wall_s", "cpu_s"} so far; stop_at: stop there as SIGTERM would (tests)."""
    torch.manual_seed(c["train.seed"])
    xtr, ytr, xev, yev, which = datasets(c)
    steps_per_epoch = len(xtr) // c["data.batch_size"]  # drop_last
    if steps_per_epoch < 1:
        raise ConfigError(f"data.batch_size: {c['data.batch_size']} exceeds the {len(xtr)} training images")
    model = build_model(c)
    if init_from:
        load_safetensors(init_from, model)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.reset_running_stats()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(param_groups(model, c), lr=c[LR], eps=c["optimizer.eps"],
                            betas=(c["optimizer.beta1"], c["optimizer.beta2"]))
    total = c["train.epochs"] * steps_per_epoch
    warmup = int(math.floor(c["schedule.warmup_epochs"] * steps_per_epoch + 0.5))  # llround
    if warmup > total:
        raise ConfigError(f"schedule.warmup_epochs: {c['schedule.warmup_epochs']} is longer than train.epochs")
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    at = resume_state(out_dir, model, opt, metrics_path) if resume else \
        {"epoch": 0, "batch": 0, "loss_sum": 0.0, "step": 0, "best": -1.0, "last": None, "sittings": []}
    log(f"run {out_dir}: cvt {params} parameters, {len(xtr)} training images, {steps_per_epoch} steps/epoch, "
        f"lr {c[LR]:g} (AdamW), torch {torch.__version__}, {torch.get_num_threads()} threads"
        + (f", resumed at epoch {at['epoch'] + 1} step {at['step']}" if resume else ""))
    with open(metrics_path, "a" if resume else "w") as metrics:
        for epoch in range(at["epoch"], c["train.epochs"]):
            t_epoch = time.monotonic()
            step, loss_sum, lr, done = train_epoch(model, opt, c, (xtr, ytr), epoch, at["step"],
                                                   lambda t: lr_at(t, c, warmup, total), metrics,
                                                   at["batch"], at["loss_sum"], stop_at)
            at.update(step=step, batch=done, loss_sum=loss_sum)
            if done < steps_per_epoch:  # stopped mid-epoch
                metrics.flush()
                save_state(out_dir, model, opt, at, sitting)
                return {"stopped": True, "step": step}
            rec = {"kind": "epoch", "epoch": epoch + 1, "step": step, "train_loss": loss_sum / steps_per_epoch,
                   "lr": lr, "epoch_seconds": time.monotonic() - t_epoch}
            if epoch + 1 == c["train.epochs"] or (epoch + 1) % c["train.eval_every"] == 0:
                ev_loss, top1, top5, img_s = evaluate(model, xev, yev, c)
                rec.update({which + "_loss": ev_loss, which + "_top1": top1, which + "_top5": top5,
                            "eval_img_per_s": img_s})
                at["best"], at["last"] = max(at["best"], top1), top1
                log(f"epoch {epoch + 1}/{c['train.epochs']}  train loss {rec['train_loss']:.4f}  {which} loss "
                    f"{ev_loss:.4f}  top-1 {top1:.2f}%  top-5 {top5:.2f}%")
            rec["best_top1"] = max(0.0, at["best"])
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
            at.update(epoch=epoch + 1, batch=0, loss_sum=0.0)
            save_state(out_dir, model, opt, at, sitting)  # a killed sitting loses at most this epoch
    return {"top1": at["last"], "set": which, "best_top1": at["best"], "parameters": params, "steps": at["step"],
            "train_images": len(xtr), "eval_images": len(xev), "sittings": at["sittings"] + [sitting()]}


def run(config_path, sets=(), out_dir="runs/torch_twin", threads=1, quiet=True, init_from=None, resume=False,
        stop_at=None):
    """Trains the twin of `sima-train --config config_path --set ...`; returns the result dict
    (also written to out_dir/result.json), or {"stopped": True, ...} when SIGTERM stopped it with
    its state saved (then `resume` goes on from it). Raises ConfigError for a config the twin
    refuses, or to resume a run of another config or one with no state."""
    t0, cpu0 = time.monotonic(), time.process_time()
    c = load_config(config_path, list(sets))
    torch.set_num_threads(threads)
    os.makedirs(out_dir, exist_ok=True)
    if resume:
        try:
            with open(os.path.join(out_dir, "config.json")) as f:
                stored = json.load(f)
        except (OSError, ValueError):
            raise ConfigError(f"--resume: {out_dir} has no readable config.json (a run folder of the twin?)")
        if not os.path.exists(os.path.join(out_dir, STATE)):
            raise ConfigError(f"--resume: {out_dir} has no {STATE} (the run saved no state: start it afresh)")
        diff = sorted(k for k in set(stored) | set(c) if stored.get(k) != c.get(k))
        if diff:
            raise ConfigError(f"--resume: the config differs from the run's in {', '.join(diff)} "
                              "(a resumed run must keep them; start a new run instead)")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=1, sort_keys=True)
    sitting = lambda: {"wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(time.process_time() - cpu0, 2)}
    res = train(c, out_dir, (lambda s: None) if quiet else (lambda s: print(s, flush=True)), init_from, resume,
                sitting, stop_at)
    if res.get("stopped"):
        return res
    res = {"twin": "pytorch", "torch": torch.__version__, "config": config_path, "sets": list(sets), **res,
           "wall_s": round(sum(x["wall_s"] for x in res["sittings"]), 2),
           "cpu_s": round(sum(x["cpu_s"] for x in res["sittings"]), 2),
           "threads": torch.get_num_threads(), "out": out_dir}
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="an experiment config (configs/paper/cvt_sima.json)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--out", help="run folder (metrics.jsonl, config.json, result.json)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the study's runs)")
    p.add_argument("--smoke", action="store_true", help="256 training / 128 test images, 1 epoch, batch 64")
    p.add_argument("--quiet", action="store_true", help="only the final JSON line")
    p.add_argument("--eval-checkpoint", metavar="FILE", help="instead of training: evaluate a sima-train "
                   "model.safetensors on the config's evaluation images (the same subset as sima-train's)")
    p.add_argument("--init-from", metavar="FILE", help="start from a sima-train checkpoint's weights (BatchNorm "
                   "statistics reset) instead of a seeded init: with the same batches, the same step losses")
    p.add_argument("--resume", action="store_true", help=f"go on from DIR/{STATE}, which the run saves after every "
                   "epoch and, stopped by SIGTERM or Ctrl-C, at the step it reached (exit 130)")
    a = p.parse_args()
    if a.threads < 1:
        sys.exit("error: --threads must be >= 1")
    if not a.out and not a.eval_checkpoint:
        sys.exit("error: --out DIR is required (the run folder)")
    sets = (SMOKE_SETS if a.smoke else []) + a.set
    try:
        if a.eval_checkpoint:
            torch.set_num_threads(a.threads)
            res = eval_checkpoint(load_config(a.config, sets), a.eval_checkpoint)
        else:
            signal.signal(signal.SIGTERM, on_stop)
            signal.signal(signal.SIGINT, on_stop)
            res = run(a.config, sets, a.out, a.threads, a.quiet, a.init_from, a.resume)
    except (ConfigError, FloatingPointError, OSError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    if res.get("stopped"):
        print(f"interrupted at step {res['step']}: state saved in {os.path.join(a.out, STATE)}; go on with the same "
              "command and --resume", flush=True)
        sys.exit(130)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
