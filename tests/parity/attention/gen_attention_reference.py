#!/usr/bin/env python3
"""Reference values from PyTorch for tests/parity/test_attention_parity.cpp.

Usage: /usr/bin/python3 tests/parity/attention/gen_attention_reference.py OUT.json

Every ref_*.py module next to this file defines CASES, a list of dicts:
  name        unique case name
  attention   the JSON model.attention object sima.cpp is configured with ("type" first)
  dim, num_heads, batch, tokens
  grid        [H, W] (the token grid the module gets) or None (the module gets H = W = 0)
  mode        "eval" (default) or "train"
  build       callable(case) -> torch.nn.Module: a transcription of the variant's official
              implementation, forward(x (B, N, C), H, W) -> (B, N, C), whose state_dict
              names are sima.cpp's parameter / buffer names for that attention module.

Per case, with seeds fixed by the case's position: every floating-point tensor of the
state dict is refilled with float32 random values (fill_state below), x and grad_out are
drawn in float32, the module runs forward and backward in float64, and the case records
its options, shapes, the state dict, x, grad_out, out, x.grad and every parameter's grad.
Non-floating buffers (e.g. BatchNorm's num_batches_tracked) are not recorded.
"""
import importlib.util
import json
import math
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent


def enc(x):
    return {"shape": list(x.shape), "data": [float(v) for v in x.detach().reshape(-1).tolist()]}


def fill_state(module, gen):
    """Random float32 values of a sensible scale, by the tensor's role (its name):
    matrices and kernels (dim >= 2, name ends in 'weight'): N(0, 1/fan_in);
    biases and running means: N(0, 0.1²); running variances: U(0.5, 1.5);
    everything else (LayerNorm weights, temperatures, scales): 1 + N(0, 0.25²)."""
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if not t.is_floating_point():
                continue
            shape = tuple(t.shape)
            if name.endswith("weight") and t.dim() >= 2:
                fan_in = math.prod(shape[1:])
                v = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
            elif name.endswith("bias") or name.endswith("running_mean"):
                v = 0.1 * torch.randn(shape, generator=gen)
            elif name.endswith("running_var"):
                v = 0.5 + torch.rand(shape, generator=gen)
            else:
                v = 1.0 + 0.25 * torch.randn(shape, generator=gen)
            t.copy_(v.to(torch.float32))


def run_case(case, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # for modules that draw their own randomness at build time
    module = case["build"](case).to(torch.float32)
    fill_state(module, gen)
    module = module.double()
    module.train(case.get("mode", "eval") == "train")
    B, N, C = case["batch"], case["tokens"], case["dim"]
    H, W = case["grid"] if case.get("grid") else (0, 0)
    x32 = torch.randn((B, N, C), generator=gen)
    g32 = torch.randn((B, N, C), generator=gen)
    state = {n: enc(t.float()) for n, t in module.state_dict().items() if t.is_floating_point()}
    x = x32.double().requires_grad_(True)
    out = module(x, H, W)
    assert out.shape == (B, N, C), f"{case['name']}: output {tuple(out.shape)}, expected {(B, N, C)}"
    out.backward(g32.double())
    grads = {n: enc(p.grad.float()) for n, p in module.named_parameters() if p.grad is not None}
    missing = [n for n, p in module.named_parameters() if p.grad is None]
    assert not missing, f"{case['name']}: no gradient reached {missing}"
    rec = {k: case[k] for k in ("name", "attention", "dim", "num_heads", "batch", "tokens")}
    rec.update(grid=case.get("grid"), mode=case.get("mode", "eval"), state=state, x=enc(x32),
               grad_out=enc(g32), out=enc(out.float()), x_grad=enc(x.grad.float()), grads=grads)
    return rec


def load_modules():
    mods = []
    for path in sorted(HERE.glob("ref_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods


def main():
    torch.set_default_dtype(torch.float32)
    cases, names = [], set()
    for mod in load_modules():
        for case in mod.CASES:
            assert case["name"] not in names, f"duplicate case name {case['name']} ({mod.__name__})"
            names.add(case["name"])
            rec = run_case(case, seed=1000 + len(cases))
            rec["module"] = mod.__name__
            cases.append(rec)
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} attention cases to {sys.argv[1]}")


if __name__ == "__main__":
    main()
