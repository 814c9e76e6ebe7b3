#!/usr/bin/env python3
"""Float64 references for tests/parity/test_sima_precision.cpp: how accurately SimA's
backward through the l1 column normalisation runs in float32.

Usage: /usr/bin/python3 tests/parity/gen_sima_precision.py OUT.json

SimA as the official code writes it (UCDvision/sima, sima.py, class SimA): qkv = Linear(x),
q and k through F.normalize(., p=1.0, dim=-2), then (q k^T) v if N < d else q (k^T v),
then proj. Each case runs in PyTorch float64 (the truth) and float32 on the same float32
inputs and output gradient, and records the inputs, the float64 input gradients and PyTorch
float32's relative error ||g32 - g64|| / ||g64|| per gradient (the C++ test allows at most
twice that). Only the gradients that pass through the normalisation are compared.

The inputs imitate a vision transformer's early blocks: many tokens alike (background), so a
q or k column is a large common part plus a small per-token part, with a few large entries
and some zero-mean (mixed-sign) columns, and an output gradient nearly equal over the tokens.
There the backward cancels: dq = (g - sign(q) s) / n is a small difference of large terms,
and every rounding in s = sum g*q/n and in n = sum |q| is magnified.
"""
import json, sys
import torch, torch.nn.functional as F

torch.manual_seed(0)
cases = []


def columns(shape, spread, large=3, mixed=True):
    """float32 of `shape` (..., N, d): per column a common part plus spread-sized token parts,
    if `mixed` a quarter of the columns zero-mean (mixed signs), `large` entries per column x12."""
    common = torch.randn(*shape[:-2], 1, shape[-1], dtype=torch.float64)
    if mixed:
        common[..., : shape[-1] // 4] = 0.0
    x = common + (common.abs() + 0.3 * (common == 0)) * spread * torch.randn(*shape, dtype=torch.float64)
    for _ in range(large):
        idx = torch.randint(0, shape[-2], (*shape[:-2], 1, shape[-1]))
        x.scatter_(-2, idx, x.gather(-2, idx) * 12)
    return x.float()


def alike(shape, spread):
    """float32 of `shape` (..., N, d), nearly equal over the tokens (axis -2)."""
    return (torch.randn(*shape[:-2], 1, shape[-1]) + spread * torch.randn(*shape)).float()


def enc(x, digits):
    return '{"shape":%s,"data":[%s]}' % (json.dumps(list(x.shape)),
                                          ",".join(f"{v:.{digits}g}" for v in x.reshape(-1).tolist()))


def sima_core(q, k, v):
    q, k = F.normalize(q, p=1.0, dim=-2), F.normalize(k, p=1.0, dim=-2)
    return (q @ k.transpose(-2, -1)) @ v if q.shape[-2] < q.shape[-1] else q @ (k.transpose(-2, -1) @ v)


def sima_module(x, w_qkv, b_qkv, w_proj, b_proj, heads):
    B, N, C = x.shape
    q, k, v = F.linear(x, w_qkv, b_qkv).reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
    return F.linear(sima_core(q, k, v).transpose(1, 2).reshape(B, N, C), w_proj, b_proj)


def case(name, fn, inputs, spread, checked, **args):
    """inputs: name -> float32 tensor, all get a gradient; the output gradient is alike().
    checked: the inputs whose gradient passes through the normalisation (the ones compared)."""
    grads = {}
    for dtype in (torch.float64, torch.float32):
        xs = {n: x.to(dtype).requires_grad_() for n, x in inputs.items()}
        y = fn(**xs)
        if dtype == torch.float64:
            gy = alike(y.shape, spread)
        y.backward(gy.to(dtype))
        grads[dtype] = {n: x.grad.double() for n, x in xs.items()}
    g64, g32 = grads[torch.float64], grads[torch.float32]
    err = {n: float((g32[n] - g64[n]).norm() / g64[n].norm()) for n in checked}
    print(name, " ".join(f"d{n} {e:.2e}" for n, e in err.items()), flush=True)
    cases.append('{"name":%s,"args":%s,"inputs":{%s},"grad_out":%s,"grads64":{%s},"torch32_error":%s}' % (
        json.dumps(name), json.dumps(args), ",".join(f'"{n}":{enc(x, 9)}' for n, x in inputs.items()),
        enc(gy, 9), ",".join(f'"{n}":{enc(g64[n], 10)}' for n in checked), json.dumps(err)))


# The fused core, q, k, v (B, h, N, d): kv_first (N >= d) and qk_first (N < d). The last one
# is shaped like CvT-13's stage 2 on 28x28 images: class token + 4x4 queries, + 2x2 keys.
for B, h, N, Nk, d, spread, large, mixed in [
        (1, 2, 784, 784, 32, 1e-2, 0, False), (1, 2, 784, 784, 32, 1e-3, 0, False),
        (1, 2, 196, 196, 32, 1e-2, 3, True), (4, 4, 49, 49, 32, 1e-3, 3, True),
        (4, 6, 17, 5, 64, 1e-3, 1, True)]:
    case(f"core B={B} h={h} N={N} Nk={Nk} d={d} spread={spread} large={large} mixed={mixed}", sima_core,
         {"q": columns((B, h, N, d), spread, large, mixed), "k": columns((B, h, Nk, d), spread, large, mixed),
          "v": alike((B, h, Nk, d), spread * 10)}, spread, ["q", "k", "v"])

# The module (official SimA: qkv Linear, core, proj Linear) on tokens alike after a LayerNorm,
# weights as timm initialises them (std 0.02) with larger qkv biases, as a trained model has.
# The first is shaped like CvT-13's stage 1 at 224x224 (56x56 tokens, C = 64, one head).
for B, N, C, heads, spread in [(1, 3136, 64, 1, 1e-2), (1, 784, 128, 4, 1e-3), (2, 196, 128, 4, 1e-3),
                               (4, 49, 128, 4, 1e-3)]:
    x = F.layer_norm(alike((B, N, C), spread), (C,)).float()
    case(f"module B={B} N={N} C={C} heads={heads} spread={spread}",
         lambda x, w_qkv, b_qkv, w_proj, b_proj: sima_module(x, w_qkv, b_qkv, w_proj, b_proj, heads),
         {"x": x, "w_qkv": (0.02 * torch.randn(3 * C, C)).float(), "b_qkv": torch.randn(3 * C).float(),
          "w_proj": (0.02 * torch.randn(C, C)).float(), "b_proj": torch.zeros(C)}, spread,
         ["x", "w_qkv", "b_qkv"], heads=heads)

with open(sys.argv[1], "w") as f:
    f.write('{"torch":%s,"cases":[%s]}' % (json.dumps(torch.__version__), ",".join(cases)))
print(f"wrote {len(cases)} cases to {sys.argv[1]}")
