"""nystromformer: the math of the official mlpen/Nystromformer code/attention_nystrom.py
(class NystromAttention: forward and iterative_inv), with the uneven landmark segments of
its ImageNet/T2T-ViT/models/token_nystromformer.py (NysAttention) for N not divisible by
the number of landmarks m, inside timm-style qkv / proj Linears.

  qkv = Linear(C, 3C)(x) -> q, k, v (B, h, N, d);  q, k scaled by d^-1/4
  m = N: o = softmax(q kᵀ) v (the official code's exact branch)
  else:  q̃, k̃ = means of m consecutive token segments (floor(N/m) tokens in the first
         (floor(N/m)+1)·m − N segments, one more in the rest)
         o = softmax(q k̃ᵀ) · iterative_inv(softmax(q̃ k̃ᵀ)) · (softmax(q̃ kᵀ) v)
  iterative_inv(A): Z = Aᵀ / n, n = the largest column sum of A over the whole batch
         ("original", the official default) or per matrix ("exact"); then 6 times
         Z = ¼ Z (13I − AZ (15I − AZ (7I − AZ)))
  conv_kernel_size ks > 0: o += Conv2d(h, h, (ks, 1), padding (ks//2, 0), groups h, no bias)(v)
  -> (B, N, C) -> proj
"""
import torch
import torch.nn as nn


def segment_means(x, m):
    N = x.shape[-2]
    s = N // m
    n_short = (s + 1) * m - N
    if n_short == m:
        return x.reshape(*x.shape[:-2], m, s, x.shape[-1]).mean(dim=-2)
    first = x[..., :n_short * s, :].reshape(*x.shape[:-2], n_short, s, x.shape[-1]).mean(dim=-2)
    rest = x[..., n_short * s:, :].reshape(*x.shape[:-2], m - n_short, s + 1, x.shape[-1]).mean(dim=-2)
    return torch.cat((first, rest), dim=-2)


def iterative_inv(A, n_iter, init):
    eye = torch.eye(A.size(-1), dtype=A.dtype)
    colsum = A.sum(dim=-2)
    if init == "original":
        n = colsum.max()
    else:
        n = colsum.max(dim=-1).values[:, :, None, None]
    Z = A.transpose(-1, -2) / n
    for _ in range(n_iter):
        AZ = A @ Z
        Z = (0.25 * Z) @ (13 * eye - AZ @ (15 * eye - AZ @ (7 * eye - AZ)))
    return Z


class Nystromformer(nn.Module):
    def __init__(self, dim, num_heads, num_landmarks=64, pinv_iters=6, pinv_init="original",
                 conv_kernel_size=0, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.m, self.iters, self.init = num_landmarks, pinv_iters, pinv_init
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.conv = None
        if conv_kernel_size > 0:
            self.conv = nn.Conv2d(num_heads, num_heads, (conv_kernel_size, 1),
                                  padding=(conv_kernel_size // 2, 0), bias=False, groups=num_heads)

    def forward(self, x, H, W):
        B, N, C = x.shape
        d = C // self.num_heads
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q / d ** 0.25
        k = k / d ** 0.25
        if self.m == N:
            o = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        else:
            ql, kl = segment_means(q, self.m), segment_means(k, self.m)
            k1 = torch.softmax(q @ kl.transpose(-1, -2), dim=-1)
            k2 = torch.softmax(ql @ kl.transpose(-1, -2), dim=-1)
            k3 = torch.softmax(ql @ k.transpose(-1, -2), dim=-1)
            o = (k1 @ iterative_inv(k2, self.iters, self.init)) @ (k3 @ v)
        if self.conv is not None:
            o = o + self.conv(v)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


def build(case):
    a = case["attention"]
    return Nystromformer(case["dim"], case["num_heads"], a.get("num_landmarks", 64), a.get("pinv_iters", 6),
                         a.get("pinv_init", "original"), a.get("conv_kernel_size", 0))


CASES = [
    # N = 16 tokens in 4 segments of 4, the conv skip, the global ("original") scale
    {"name": "nystrom_even_conv", "attention": {"type": "nystromformer", "num_landmarks": 4, "conv_kernel_size": 3},
     "dim": 24, "num_heads": 3, "batch": 2, "tokens": 16, "grid": [4, 4], "build": build},
    # N = 17 (a class token and 4x4): 5 landmarks in segments 3, 3, 3, 4, 4; per-matrix scale
    {"name": "nystrom_uneven_exact", "attention": {"type": "nystromformer", "num_landmarks": 5, "pinv_init": "exact"},
     "dim": 16, "num_heads": 2, "batch": 2, "tokens": 17, "grid": [4, 4], "build": build},
    # m = N: the official exact softmax branch
    {"name": "nystrom_m_equals_n", "attention": {"type": "nystromformer", "num_landmarks": 9},
     "dim": 8, "num_heads": 1, "batch": 1, "tokens": 9, "grid": None, "build": build},
]
