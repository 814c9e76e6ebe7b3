#!/usr/bin/env python3
"""results/torch_twin.py's DEFAULTS against the config sima-train resolves: every default the twin
declares must be sima.cpp's, so a C++ default that changes fails here until the twin follows.

  tests/results/test_twin_defaults.py BIN_DIR

`sima-train --check` prints the resolved config (every key, its value) of a config that names
only the twin's model (cvt_13_28_sima); the twin's DEFAULTS are read from its source (no torch
needed). Keys the resolved config has and the twin does not know are listed, not failed: the twin
refuses them when a config sets them.
"""
import ast
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TWIN = os.path.join(ROOT, "results", "torch_twin.py")


def twin_tables():
    """DEFAULTS, READ and NO_EFFECT as torch_twin.py writes them, evaluated from its source."""
    tree = ast.parse(open(TWIN).read(), TWIN)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DEFAULTS", "READ", "NO_EFFECT"):
                out[name] = eval(compile(ast.Expression(node.value), TWIN, "eval"), {})  # literals only
    missing = {"DEFAULTS", "READ", "NO_EFFECT"} - set(out)
    if missing:
        sys.exit(f"error: {TWIN}: no {', '.join(sorted(missing))} table found")
    return out["DEFAULTS"], out["READ"], out["NO_EFFECT"]


def flatten(doc, prefix=""):  # as torch_twin.flatten: sections, then model.attention
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict) and (not prefix or prefix == "model."):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def same(a, b):
    """Equal as configs: lists element by element, bools as bools, numbers to float precision."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=0.0)  # C++ floats print 7 digits
    return a == b


def resolved(bin_dir):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "twin.json")
        with open(path, "w") as f:
            json.dump({"model": {"name": "cvt_13_28_sima"}}, f)
        p = subprocess.run([os.path.join(bin_dir, "sima-train"), "--config", path, "--check"],
                           capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: sima-train --check failed: {p.stderr.strip()}")
    return flatten(json.loads(p.stdout))


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
    defaults, read, no_effect = twin_tables()
    cpp = resolved(bin_dir)
    wrong = [f"{k}: torch_twin.py says {json.dumps(v)}, sima-train --check {json.dumps(cpp[k])}"
             for k, v in defaults.items() if k in cpp and not same(v, cpp[k])]
    absent = [k for k in defaults if k not in cpp]
    unknown = sorted(k for k in cpp if k not in defaults and k not in read and k not in no_effect
                     and k.split(".")[0] not in ("dino", "distill"))
    for k in unknown:
        print(f"note: {k} ({json.dumps(cpp[k])}) is a key of sima.cpp the twin does not know")
    if wrong or absent:
        for line in wrong:
            print("error: default differs: " + line)
        for k in absent:
            print(f"error: {k}: torch_twin.py declares it, sima-train --check has no such key")
        sys.exit(1)
    print(f"test_twin_defaults.py: {len(defaults)} defaults of results/torch_twin.py are sima-train's")


if __name__ == "__main__":
    main()
