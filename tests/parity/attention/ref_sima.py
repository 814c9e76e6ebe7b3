"""sima: the official SimA attention (UCDvision/sima, sima.py, class SimA).

  qkv -> q, k, v (B, h, N, d)
  q, k = F.normalize(·, p=1, dim=-2): every channel ℓ1-normalised over the N tokens (eps 1e-12)
  o = (q kᵀ) v  when N/d < 1,  else  q (kᵀ v)      no scale, no softmax
  -> (B, N, C) -> proj

sima.cpp's deliberate options on top of the official code (docs: attention.norm, .order):
norm "l2" / "none" normalise with p=2 / not at all, and order "qk_first" / "kv_first" pins
the product order that "auto" (the official rule) would choose.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SimA(nn.Module):
    def __init__(self, dim, num_heads, norm="l1", order="auto", eps=1e-12, qkv_bias=True):
        super().__init__()
        self.num_heads, self.norm, self.order, self.eps = num_heads, norm, order, eps
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        d = C // self.num_heads
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.norm != "none":
            p = 1.0 if self.norm == "l1" else 2.0
            k = F.normalize(k, p=p, dim=-2, eps=self.eps)
            q = F.normalize(q, p=p, dim=-2, eps=self.eps)
        qk_first = N / d < 1 if self.order == "auto" else self.order == "qk_first"
        o = (q @ k.transpose(-2, -1)) @ v if qk_first else q @ (k.transpose(-2, -1) @ v)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


def build(case):
    a = case["attention"]
    return SimA(case["dim"], case["num_heads"], a.get("norm", "l1"), a.get("order", "auto"),
                a.get("eps", 1e-12))


CASES = [
    # official rule, both sides of it: N < d (q kᵀ first) and N >= d (kᵀ v first)
    {"name": "sima_auto_qk_first", "attention": {"type": "sima"}, "dim": 32, "num_heads": 2,
     "batch": 2, "tokens": 9, "grid": [3, 3], "build": build},
    {"name": "sima_auto_kv_first", "attention": {"type": "sima"}, "dim": 24, "num_heads": 3,
     "batch": 2, "tokens": 17, "grid": [4, 4], "build": build},
    {"name": "sima_pinned_qk_first", "attention": {"type": "sima", "order": "qk_first"}, "dim": 16,
     "num_heads": 2, "batch": 1, "tokens": 12, "grid": None, "build": build},
    {"name": "sima_pinned_kv_first", "attention": {"type": "sima", "order": "kv_first"}, "dim": 32,
     "num_heads": 2, "batch": 1, "tokens": 5, "grid": None, "build": build},
    {"name": "sima_norm_l2", "attention": {"type": "sima", "norm": "l2"}, "dim": 16, "num_heads": 2,
     "batch": 2, "tokens": 10, "grid": None, "build": build},
    {"name": "sima_norm_none", "attention": {"type": "sima", "norm": "none", "order": "qk_first"},
     "dim": 16, "num_heads": 2, "batch": 1, "tokens": 7, "grid": None, "build": build},
]
