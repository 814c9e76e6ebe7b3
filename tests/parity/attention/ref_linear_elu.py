"""linear_elu: linear attention of Katharopoulos et al. ("Transformers are RNNs", official
idiap/fast-transformers, fast_transformers/attention/linear_attention.py, LinearAttention
with the default feature map elu(x) + 1), non-causal, as self-attention on x.

  q, k, v (B, h, N, d);  Q = elu(q) + 1, K = elu(k) + 1
  KV = Σ_j K_j v_jᵀ,  Z = 1 / (Q_i · Σ_j K_j + eps),  out_i = Q_i KV · Z_i     eps = 1e-6
  -> (B, N, C) -> proj

Names as sima.cpp's: qkv Linear(C, 3C) (rows q, k, v) and proj.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-6


class LinearElu(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.h, self.d = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        Q, K = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.einsum("bhnd,bhnm->bhdm", K, v)
        z = 1 / (torch.einsum("bhnd,bhd->bhn", Q, K.sum(2)) + EPS)
        out = torch.einsum("bhnd,bhdm,bhn->bhnm", Q, kv, z)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


def build(case):
    return LinearElu(case["dim"], case["num_heads"])


CASES = [
    {"name": "linear_elu", "attention": {"type": "linear_elu"}, "dim": 32, "num_heads": 2, "batch": 2,
     "tokens": 17, "grid": None, "build": build},
    {"name": "linear_elu_1head", "attention": {"type": "linear_elu"}, "dim": 16, "num_heads": 1, "batch": 2,
     "tokens": 5, "grid": None, "build": build},
]
