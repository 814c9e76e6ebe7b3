#!/usr/bin/env python3
"""Reference values from PyTorch for tests/parity/test_torch_parity.cpp.

Usage: /usr/bin/python3 tests/parity/gen_reference.py OUT.json

Each case runs one PyTorch op in float64 on float32-representable random inputs,
backpropagates a random output gradient, and records inputs, output and input
gradients. The C++ test runs the same op in sima.cpp (float32) and compares.
"""
import json, sys
import torch, torch.nn.functional as F

torch.manual_seed(0)
cases = []


def t(*shape, lo=None, hi=None, away=None):
    x = torch.randn(*shape, dtype=torch.float32)
    if lo is not None:
        x = torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo
    if away is not None:  # keep |x| >= away (no kinks inside finite differences)
        x = torch.where(x.abs() < away, torch.sign(x + 1e-9) * away, x)
    return x


def enc(x):
    return {"shape": list(x.shape), "data": [float(v) for v in x.detach().reshape(-1).tolist()]}


def case(op, fn, inputs, grad=None, **args):
    """inputs: float32 tensors; grad: which ones get a gradient (default all)."""
    grad = grad if grad is not None else [True] * len(inputs)
    xs = [x.double().requires_grad_(g) for x, g in zip(inputs, grad)]
    y = fn(*xs, **args)
    gy = torch.randn(y.shape, dtype=torch.float32)
    if any(grad):
        y.backward(gy.double())
    cases.append({"op": op, "args": args,
                  "inputs": [dict(enc(x), grad=g) for x, g in zip(inputs, grad)],
                  "grad_out": enc(gy), "out": enc(y.float()),
                  "grads": [enc(x.grad.float()) if g else None for x, g in zip(xs, grad)]})


# elementwise and activations
case("add", torch.add, [t(2, 3, 1), t(4)])
case("div", torch.div, [t(3, 4), t(4, lo=0.5, hi=2.0)])
case("pow", torch.pow, [t(2, 3, lo=0.5, hi=2.0), t(3, lo=-1.0, hi=2.0)])
case("gelu", lambda x: F.gelu(x), [t(4, 5)])
case("elu", lambda x, alpha: F.elu(x, alpha), [t(4, 5, away=1e-3)], alpha=0.7)
case("softplus", lambda x, beta, threshold: F.softplus(x, beta, threshold), [t(4, 5) * 4], beta=2.0, threshold=5.0)
case("relu6", lambda x: F.relu6(x), [t(4, 5, away=1e-3) * 4])
case("sigmoid", torch.sigmoid, [t(3, 3)])
case("tanh", torch.tanh, [t(3, 3)])
case("clamp", lambda x, lo, hi: torch.clamp(x, lo, hi), [t(3, 4, away=1e-3)], lo=-0.5, hi=0.7)
# reductions
case("sum", lambda x, dims, keepdim: x.sum(dims, keepdim=keepdim), [t(2, 3, 4)], dims=[0, 2], keepdim=True)
case("mean", lambda x, dims, keepdim: x.mean(dims, keepdim=keepdim), [t(2, 3, 4)], dims=[-1], keepdim=False)
case("var", lambda x, dims, correction, keepdim: x.var(dims, unbiased=bool(correction), keepdim=keepdim),
     [t(3, 5, 2)], dims=[1], correction=1, keepdim=False)
case("max", lambda x, dim, keepdim: x.max(dim, keepdim=keepdim).values, [t(3, 6)], dim=1, keepdim=False)
# shapes
case("permute", lambda x, dims: x.permute(dims), [t(2, 3, 4)], dims=[2, 0, 1])
case("cat", lambda a, b, dim: torch.cat([a, b], dim), [t(2, 3), t(2, 2)], dim=1)
case("pad", lambda x, pads: F.pad(x, pads), [t(1, 2, 3, 3)], pads=[1, 2, 0, 1])
case("expand", lambda x, sizes: x.expand(*sizes), [t(3, 1)], sizes=[2, 3, 4])
# products
case("matmul", torch.matmul, [t(2, 1, 3, 4), t(3, 4, 5)])
case("linear", F.linear, [t(2, 3, 5), t(4, 5), t(4)])
# convolution and pooling
case("conv2d", lambda x, w, b, stride, padding, groups: F.conv2d(x, w, b, stride, padding, 1, groups),
     [t(2, 4, 6, 5), t(6, 2, 3, 3), t(6)], stride=2, padding=1, groups=2)
case("conv2d", lambda x, w, b, stride, padding, groups: F.conv2d(x, w, b, stride, padding, 1, groups),
     [t(2, 3, 5, 5), t(3, 1, 3, 3), t(3)], stride=1, padding=1, groups=3)
case("avg_pool2d", lambda x, kernel, stride, padding: F.avg_pool2d(x, kernel, stride, padding),
     [t(2, 2, 7, 6)], kernel=3, stride=2, padding=1)
for mode in ["nearest", "bilinear", "bicubic"]:
    for ac in ([None] if mode == "nearest" else [False, True]):
        for size in [(7, 9), (3, 2)]:
            case("interpolate", lambda x, size, mode, align_corners:
                 F.interpolate(x, size=tuple(size), mode=mode, align_corners=align_corners),
                 [t(1, 2, 5, 4)], size=list(size), mode=mode, align_corners=ac)
# normalisation
case("layer_norm", lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
     [t(2, 3, 6), t(6), t(6)], eps=1e-6)
case("batch_norm_train", lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, True, 0.1, eps),
     [t(3, 2, 3, 3), t(2), t(2)], eps=1e-5)
for p in [1.0, 2.0]:
    x = t(4, 3)
    x[:, 0] = torch.tensor([1e-3, -2e-3, 1e-3, 0.0])  # column 0 below eps: the clamp branch
    case("normalize", lambda x, p, dim, eps: F.normalize(x, p=p, dim=dim, eps=eps), [x], p=p, dim=0, eps=0.05)
    case("normalize", lambda x, p, dim, eps: F.normalize(x, p=p, dim=dim, eps=eps), [t(2, 5, 3)], p=p, dim=-2, eps=1e-12)
# softmax and cross-entropy
case("softmax", lambda x, dim: F.softmax(x, dim), [t(2, 3, 4) * 3], dim=1)
case("log_softmax", lambda x, dim: F.log_softmax(x, dim), [t(3, 5) * 3], dim=-1)
labels = [2, 0, 4, 4]
for ls in [0.0, 0.1]:
    for red in ["mean", "sum", "none"]:
        case("cross_entropy", lambda x, target, label_smoothing, reduction:
             F.cross_entropy(x, torch.tensor(target), label_smoothing=label_smoothing, reduction=reduction),
             [t(4, 5)], target=labels, label_smoothing=ls, reduction=red)
soft = torch.softmax(torch.randn(4, 5), -1)
case("cross_entropy_soft", lambda x, q, label_smoothing: F.cross_entropy(x, q, label_smoothing=label_smoothing),
     [t(4, 5), soft], grad=[True, False], label_smoothing=0.1)

with open(sys.argv[1], "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f)
print(f"wrote {len(cases)} cases to {sys.argv[1]}")
