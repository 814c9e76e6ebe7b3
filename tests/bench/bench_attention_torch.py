#!/usr/bin/env python3
"""PyTorch side of bench_attention: forward+backward of one attention core
(everything between qkv and proj) for softmax and SimA, same shapes, same timing.

/usr/bin/python3 tests/bench/bench_attention_torch.py --threads T
Prints one line per (shape, variant): fwd ms, fwd+bwd ms (median of repeats after warm-up).
"""
import sys, time, torch, torch.nn.functional as F

threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 0
if threads:
    torch.set_num_threads(threads)
torch.manual_seed(0)


def softmax_core(q, k, v):
    return ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1) @ v


def sima_core(q, k, v):
    q, k = F.normalize(q, p=1.0, dim=-2), F.normalize(k, p=1.0, dim=-2)
    return (q @ k.transpose(-2, -1)) @ v if q.shape[-2] < q.shape[-1] else q @ (k.transpose(-2, -1) @ v)


def median_ms(f, reps=11):
    f(); f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2] * 1e3


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for (B, N, C, h) in [(8, 256, 512, 8), (8, 64, 256, 8)]:
    d = C // h
    q, k, v = [torch.randn(B, h, N, d, requires_grad=True) for _ in range(3)]
    g = torch.randn(B, h, N, d)
    for name, core in [("softmax", softmax_core), ("sima", sima_core)]:
        with torch.no_grad():
            fwd = median_ms(lambda: core(q, k, v))

        def step():
            for t in (q, k, v):
                t.grad = None
            core(q, k, v).backward(g)
        print(f"B={B} N={N} C={C} h={h} d={d} {name:<8} fwd {fwd:8.3f} ms  fwd+bwd {median_ms(step):8.3f} ms")
