"""cosformer: the official cosFormer attention (OpenNLPLab/cosFormer, cosformer.py,
CosformerAttention.forward, non-causal, act_fun "relu"), self-attention on x.

  q, k, v = W_q x, W_k x, W_v x;  q, k = relu(q), relu(k);  per head (N, d)
  cos1d (the official code): idx_i = π/2 · i, i = 1..N, M = max(len_q, len_k) = N
        q_ = [q sin(idx/M), q cos(idx/M)],  k_ likewise                      (N, 2d)
        out = (q_ (k_ᵀ v)) / clamp_min(q_ · Σ_j k_j, 1e-6)
  cos2d (SimA supplement A.4, its product form on the H×W grid): row angle a = π/2 · r/H,
        column angle b = π/2 · c/W (r, c from 1; tokens before the grid at r = c = 0),
        q_ = [q sa sb, q sa cb, q ca sb, q ca cb] (N, 4d), so q_i·k_j = q_i·k_j cos(Δa) cos(Δb)
  none  (SimA's Table 2 row, sima.cpp's choice of denominator): q_ = q, out = (q (kᵀ v)) / (q·Σk + 1e-6)
  -> (B, N, C) -> out_proj

Names as sima.cpp's: the official q_proj, k_proj, v_proj are one Linear(C, 3C) `qkv`
(rows q, k, v), out_proj is `proj`.
"""
import math

import torch
import torch.nn as nn

EPS = 1e-6


def factors(reweight, N, H, W):
    """(N, T) with cos-reweight_ij = Σ_t w_it w_jt."""
    if reweight == "cos1d":
        idx = math.pi / 2 * torch.arange(1, N + 1, dtype=torch.float64)
        return torch.stack([torch.sin(idx / N), torch.cos(idx / N)], dim=1)
    extra = N - H * W
    g = torch.arange(N) - extra
    r = torch.where(g < 0, torch.zeros_like(g), g // W + 1).double()
    c = torch.where(g < 0, torch.zeros_like(g), g % W + 1).double()
    a, b = math.pi / 2 * r / H, math.pi / 2 * c / W
    return torch.stack([a.sin() * b.sin(), a.sin() * b.cos(), a.cos() * b.sin(), a.cos() * b.cos()], dim=1)


class Cosformer(nn.Module):
    def __init__(self, dim, num_heads, reweight="none"):
        super().__init__()
        self.h, self.d, self.reweight = num_heads, dim // num_heads, reweight
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        q, k = torch.relu(q), torch.relu(k)
        if self.reweight == "none":
            kv = k.transpose(-1, -2) @ v
            den = q @ k.sum(2, keepdim=True).transpose(-1, -2) + EPS
            out = (q @ kv) / den
        else:
            w = factors(self.reweight, N, H, W).to(x.dtype)  # (N, T)
            q_ = torch.cat([q * w[:, t, None] for t in range(w.shape[1])], dim=-1)
            k_ = torch.cat([k * w[:, t, None] for t in range(w.shape[1])], dim=-1)
            kv = torch.einsum("bhnd,bhnm->bhdm", k_, v)
            z = 1 / torch.clamp_min(torch.einsum("bhnd,bhd->bhn", q_, k_.sum(2)), EPS)
            out = torch.einsum("bhnd,bhdm,bhn->bhnm", q_, kv, z)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


def build(case):
    return Cosformer(case["dim"], case["num_heads"], case["attention"].get("reweight", "none"))


def case(name, reweight, dim, heads, batch, tokens, grid):
    att = {"type": "cosformer"} if reweight is None else {"type": "cosformer", "reweight": reweight}
    return {"name": name, "attention": att, "dim": dim, "num_heads": heads, "batch": batch,
            "tokens": tokens, "grid": grid, "build": build}


CASES = [
    case("cosformer_none", None, 32, 2, 2, 17, [4, 4]),
    case("cosformer_cos1d", "cos1d", 32, 2, 2, 17, None),
    case("cosformer_cos1d_1head", "cos1d", 16, 1, 2, 9, None),
    case("cosformer_cos2d", "cos2d", 32, 2, 2, 24, [4, 6]),
    case("cosformer_cos2d_cls", "cos2d", 24, 3, 2, 17, [4, 4]),
]
