"""xca: XCiT's cross-covariance attention, timm's XCA (pytorch-image-models,
timm/models/xcit.py, class XCA; the same as facebookresearch/xcit, xcit.py).

  qkv -> q, k, v transposed to (B, h, d, N)
  q, k = F.normalize(·, dim=-1): every channel ℓ2-normalised over the N tokens (eps 1e-12)
  attn = softmax((q kᵀ) · temperature) over the last dim (d×d per head), temperature (h, 1, 1)
  o = attn v (B, h, d, N) -> (B, N, C) -> proj
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TimmXCA(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)  # (B, h, d, N)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)
        return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(B, N, C))


def build(case):
    return TimmXCA(case["dim"], case["num_heads"])


CASES = [
    {"name": "xca_xcit", "attention": {"type": "xca"}, "dim": 24, "num_heads": 3,
     "batch": 2, "tokens": 16, "grid": [4, 4], "build": build},
    {"name": "xca_wide_head", "attention": {"type": "xca"}, "dim": 32, "num_heads": 2,
     "batch": 1, "tokens": 6, "grid": None, "build": build},
]
