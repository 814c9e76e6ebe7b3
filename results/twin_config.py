"""The config of results/torch_twin.py: the one sima-train resolves, and what the twin implements of it.

Every value, the defaults included, comes from sima-train: `sima-train --config FILE --set ... --check
--derived` prints the resolved config (every key of sima.cpp's schema) and the peak lr the run
computes from it, and the twin takes both as they are; no sima.cpp default is written here. What
the twin adds is which keys it implements:
  - a key the twin reads (READ) may take any value sima-train accepts;
  - a key that cannot change this recipe's numbers (NO_EFFECT) is accepted and ignored;
  - every other key must keep sima.cpp's default, the value sima-train resolves for a config that
    names only the model and its attention type: the twin never trains another recipe.
ctest results.twin_defaults (tests/results/test_twin_defaults.py) checks that the values follow a
sima-train whose defaults change. The binaries are SIMA_BIN_DIR's, else build/bin. No torch here.
"""
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.environ.get("SIMA_BIN_DIR", os.path.join(ROOT, "build", "bin"))


class ConfigError(Exception):
    pass


# Read by the twin: any valid value.
READ = {
    "data.train_subset", "data.test_subset", "data.validation", "data.validation_seed", "data.batch_size",
    "data.eval_batch_size", "augment.padding", "augment.hflip", "optimizer.lr", "optimizer.base_lr",
    "optimizer.lr_base_batch", "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.weight_decay",
    "optimizer.no_weight_decay", "schedule.warmup_epochs", "schedule.warmup_lr", "schedule.min_lr",
    "train.epochs", "train.seed", "train.label_smoothing", "train.eval_every", "train.log_every",
    "model.stage_dims", "model.stage_depths", "model.stage_heads", "model.stage_drop_path", "model.attention.type",
}
# Cannot change this recipe's numbers: accepted and ignored.
NO_EFFECT = {
    "name", "data.num_workers", "train.checkpoint_every", "train.allreduce_bucket_mb", "train.sync_batchnorm",
    "augment.crop_pct",                   # 28x28 images pass the evaluation resize untouched
    "augment.scale", "augment.ratio",     # random_resized_crop only
    "optimizer.momentum", "optimizer.nesterov",                     # sgd only
    "schedule.decay_epochs", "schedule.decay_rate",                 # step schedule only
    "mixup.prob", "mixup.switch_prob", "train.ema_decay",           # mixup / EMA are off
    "model.name",                                                   # checked in resolve()
}
MODEL_NAMES = {"cvt_13_28": "softmax", "cvt_13_28_sima": "sima"}  # registry name -> attention type
LR = "derived.lr"  # the key of the peak lr, as sima-train computes it (base_lr * batch / lr_base_batch, or lr)


def apply_set(doc, assignment):
    """sima-train's --set key.path=value: the value is JSON when it parses, else a string."""
    key, eq, text = assignment.partition("=")
    if not eq or not key or "." not in key and key not in ("name", "model"):
        raise ConfigError(f"--set {assignment!r}: expected section.key=value (e.g. train.seed=1)")
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    parts, node = key.split("."), doc
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment!r}: '{p}' is not a section")
    node[parts[-1]] = value


def flatten(doc, prefix=""):
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict) and (not prefix or prefix == "model."):  # sections, model.attention
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def sima_check(config_path, sets, bin_dir):
    """`sima-train --check --derived` of a config and its --set overrides -> (flat resolved config,
    derived values); sima-train's refusal, naming the key, as a ConfigError."""
    argv = [os.path.join(bin_dir, "sima-train"), "--config", config_path, "--check", "--derived"]
    for s in sets:
        argv += ["--set", s]
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise ConfigError(f"cannot run {argv[0]} ({e.strerror}): build it, or set SIMA_BIN_DIR")
    if p.returncode != 0:
        raise ConfigError(p.stderr.strip().removeprefix("sima-train: error: "))
    out = json.loads(p.stdout)
    return flatten(out["config"]), out["derived"]


def defaults_of(name, attention, bin_dir):
    """sima.cpp's defaults for model `name` with attention `attention`: what sima-train resolves
    for a config that names only those."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "defaults.json")
        with open(path, "w") as f:
            json.dump({"model": {"name": name, "attention": {"type": attention}}}, f)
        return sima_check(path, [], bin_dir)[0]


def resolve(config_path, doc, sets, bin_dir):
    """The config as sima-train resolves it -> {key: value} for every key, plus LR; ConfigError
    names a key sima-train refuses or the twin does not implement at the value given."""
    name = flatten(doc).get("model.name")
    if name not in MODEL_NAMES:
        raise ConfigError(f"model.name: {name!r} is not implemented by the twin (only {', '.join(MODEL_NAMES)})")
    c, derived = sima_check(config_path, sets, bin_dir)
    defaults = defaults_of(name, c["model.attention.type"], bin_dir)
    for key, value in c.items():
        if key not in READ and key not in NO_EFFECT and not same(value, defaults.get(key)):
            raise ConfigError(f"{key}: {json.dumps(value)} is not implemented by the twin "
                              f"(only sima.cpp's default {json.dumps(defaults.get(key))})")
    c[LR] = derived["lr"]
    check_values(c)
    return c


def check_values(c):
    """What the twin needs beyond what sima-train checks: its two attentions, CvT's three stages."""
    def need(ok, key, what):
        if not ok:
            raise ConfigError(f"{key}: {json.dumps(c[key])} {what}")

    need(c["model.attention.type"] in ("sima", "softmax"), "model.attention.type", "is not one of sima, softmax")
    for k in ("model.stage_dims", "model.stage_depths", "model.stage_heads", "model.stage_drop_path"):
        need(isinstance(c[k], list) and len(c[k]) == 3, k, "must be a list of 3 entries (one per stage)")


def load_config(config_path, sets, bin_dir=None):
    """The twin's config of `sima-train --config config_path --set s ...` (see resolve)."""
    try:
        with open(config_path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{config_path}: {e}")
    if not isinstance(doc, dict) or "model" not in doc:
        raise ConfigError(f"{config_path}: expected a JSON object with a \"model\" section")
    for s in sets:
        apply_set(doc, s)
    return resolve(config_path, doc, sets, bin_dir or BIN_DIR)
