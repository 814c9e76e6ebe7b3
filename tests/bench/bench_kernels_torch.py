#!/usr/bin/env python3
"""PyTorch side of bench_kernels: the same kernels on the same shape, same report.

/usr/bin/python3 tests/bench/bench_kernels_torch.py [rows cols] [--threads T]
(needs Debian's python3-torch). Compare with OMP_NUM_THREADS=T build/bin/bench_kernels.
"""
import sys, time, torch, torch.nn.functional as F

args = [a for a in sys.argv[1:] if not a.startswith("--")]
threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 0
if threads:
    torch.set_num_threads(threads)
    args = [a for a in args if a != str(threads)]
rows, cols = (int(args[0]), int(args[1])) if len(args) >= 2 else (12608, 192)
torch.manual_seed(0)
a, b = torch.randn(rows, cols), torch.randn(rows, cols)
w, bias = torch.ones(cols), torch.zeros(cols)
n = rows * cols


def median_seconds(f, reps=15):
    f(); f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


print(f"torch {torch.__version__}, shape ({rows}, {cols}), {torch.get_num_threads()} threads")
print(f"{'kernel':<12} {'ms':>10} {'GB/s':>10}")
f4 = 4.0 * n
with torch.no_grad():
    for name, nbytes, f in [
        ("add", 3 * f4, lambda: a + b), ("add_bias", 2 * f4, lambda: a + bias),
        ("mul_scalar", 2 * f4, lambda: a * 0.5), ("relu", 2 * f4, lambda: F.relu(a)),
        ("gelu", 2 * f4, lambda: F.gelu(a)), ("exp", 2 * f4, lambda: a.exp()),
        ("layer_norm", 2 * f4, lambda: F.layer_norm(a, (cols,), w, bias, 1e-6)),
        ("softmax", 2 * f4, lambda: a.softmax(-1))]:
        s = median_seconds(f)
        print(f"{name:<12} {s * 1e3:10.3f} {nbytes / s / 1e9:10.2f}")
xg, gy = a.clone().requires_grad_(), torch.ones(rows, cols)  # forward and backward, as bench_kernels
s = median_seconds(lambda: F.gelu(xg).backward(gy))
print(f"{'gelu_fwdbwd':<12} {s * 1e3:10.3f} {5 * f4 / s / 1e9:10.2f}")
