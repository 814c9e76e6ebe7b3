#!/usr/bin/env python3
"""results/torch_twin.py takes its settings from sima-train, so a C++ default that changes is the
twin's default too (results/twin_config.py; no torch needed).

  tests/results/test_twin_defaults.py BIN_DIR

1. The twin's config of configs/paper/cvt_sima.json (with a --set) is, key for key, what
   `sima-train --check` resolves, and its lr is the one `--check --derived` computes.
2. A sima-train whose defaults changed (BIN_DIR's sima-train behind a wrapper that alters what
   --check prints for keys the config does not set) changes the twin's values the same way: a
   default declared on the Python side would keep the old value and fail here. A key the twin
   does not implement follows too: the changed default is accepted, a value off it refused.
"""
import json
import os
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "results"))
import twin_config  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "paper", "cvt_sima.json")
SETS = ["train.seed=3", "optimizer.lr=0"]  # lr 0: the peak lr is base_lr * batch / lr_base_batch
# Keys cvt_sima.json leaves at their defaults -> the value the wrapper's sima-train has for them.
CHANGED = {"optimizer.beta2": 0.995, "optimizer.base_lr": 0.002, "train.eval_every": 2,  # read by the twin
           "model.norm_eps": 1e-6}                                                        # must be the default
WRAPPER = """#!/usr/bin/env python3
# sima-train with other defaults: --check prints CHANGED for every config; everything else as it is.
import json, subprocess, sys
p = subprocess.run([{real!r}] + sys.argv[1:], capture_output=True, text=True)
if p.returncode != 0 or "--check" not in sys.argv:
    sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); sys.exit(p.returncode)
out = json.loads(p.stdout)
cfg = out["config"] if "--derived" in sys.argv else out
for key, value in {changed!r}.items():
    node, parts = cfg, key.split(".")
    for k in parts[:-1]:
        node = node[k]
    if not any(s.startswith(key + "=") for s in sys.argv):  # a --set keeps its value
        node[parts[-1]] = value
if "--derived" in sys.argv:  # sima-train's formula, on the changed values
    o = cfg["optimizer"]
    out["derived"]["lr"] = o["lr"] if o["lr"] > 0 else o["base_lr"] * cfg["data"]["batch_size"] / o["lr_base_batch"]
print(json.dumps(out))
"""


def fail(msg):
    sys.exit("error: " + msg)


def check_resolved(bin_dir):
    p = subprocess.run([os.path.join(bin_dir, "sima-train"), "--config", CONFIG, "--check", "--derived"] +
                       [a for s in SETS for a in ("--set", s)], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"sima-train --check --derived failed: {p.stderr.strip()}")
    out = json.loads(p.stdout)
    cpp = twin_config.flatten(out["config"])
    c = twin_config.load_config(CONFIG, SETS, bin_dir)
    wrong = [k for k in cpp if not twin_config.same(c.get(k), cpp[k])]
    if wrong or set(c) != set(cpp) | {twin_config.LR}:
        fail(f"the twin's config is not sima-train's in {wrong or sorted(set(c) ^ set(cpp))}")
    if c[twin_config.LR] != out["derived"]["lr"] or c["train.seed"] != 3:
        fail(f"lr {c[twin_config.LR]} / seed {c['train.seed']}: not sima-train's {out['derived']['lr']} / 3")
    pinned = sorted(k for k in c if k not in twin_config.READ and k not in twin_config.NO_EFFECT)
    print(f"test_twin_defaults.py: the twin's {len(c) - 1} keys are sima-train --check's ({len(pinned)} pinned at "
          f"sima.cpp's defaults), lr {c[twin_config.LR]:g} is --derived's")


def check_follows(bin_dir):
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "sima-train")
        with open(fake, "w") as f:
            f.write(WRAPPER.format(real=os.path.join(os.path.abspath(bin_dir), "sima-train"), changed=CHANGED))
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        c = twin_config.load_config(CONFIG, SETS, d)
        stale = {k: c[k] for k, v in CHANGED.items() if not twin_config.same(c[k], v)}
        if stale:
            fail(f"sima-train's defaults changed to {CHANGED}, the twin kept {stale}")
        lr = CHANGED["optimizer.base_lr"] * c["data.batch_size"] / c["optimizer.lr_base_batch"]
        if abs(c[twin_config.LR] - lr) > 1e-12:
            fail(f"sima-train's lr is {lr} after the change, the twin's {c[twin_config.LR]}")
        try:
            twin_config.load_config(CONFIG, SETS + ["model.norm_eps=1e-5"], d)  # the old default, now off it
        except twin_config.ConfigError as e:
            if not str(e).startswith("model.norm_eps: 1e-05 is not implemented"):
                fail(f"unclear refusal: {e}")
        else:
            fail("model.norm_eps off sima.cpp's (changed) default was accepted")
    print(f"test_twin_defaults.py: with sima-train's defaults changed ({', '.join(CHANGED)}), the twin follows")


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
    try:
        check_resolved(bin_dir)
        check_follows(bin_dir)
    except twin_config.ConfigError as e:
        fail(f"the twin refused the config: {e}")


if __name__ == "__main__":
    main()
