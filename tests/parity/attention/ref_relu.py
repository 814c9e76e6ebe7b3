"""relu: ReLU attention of Wortsman et al., "Replacing softmax with ReLU in Vision
Transformers" (2023): softmax replaced by relu and a 1/L scale, L = N the sequence length,
with qk-layernorm (Dehghani et al., ViT-22B) in the paper's main runs. The paper has no code
release; its qk-layernorm is the one of Flax's MultiHeadDotProductAttention(normalize_qk=True)
(flax/linen/attention.py): LayerNorm over the head dim d of q and of k, per head, epsilon
1e-6, a scale (d) shared by the heads and no bias (use_bias=False).

  q, k, v (B, h, N, d);  q, k = LN(q), LN(k) if qk_norm
  out = N^-α · fn(q kᵀ / √d) v                      fn = relu, α = 1 in the paper
  out = out ⊙ gate(x) if gate (sima.cpp's option: a Linear(C, C) of the block input, no sigmoid)
  -> (B, N, C) -> proj

Names as sima.cpp's: qkv Linear(C, 3C) (rows q, k, v), proj, q_norm / k_norm (weight, and
bias when qk_norm_bias is true, timm's LayerNorm), gate.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

FNS = {"relu": torch.relu, "relu2": lambda s: torch.relu(s) ** 2, "gelu": F.gelu}


class QKNorm(nn.Module):
    """LayerNorm over d, eps 1e-6; with bias = False, Flax's scale-only LayerNorm."""

    def __init__(self, d, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-6)


class ReluAttention(nn.Module):
    def __init__(self, dim, num_heads, fn="relu", alpha=1.0, qk_norm=False, qk_norm_bias=True, gate=False):
        super().__init__()
        self.h, self.d, self.fn, self.alpha = num_heads, dim // num_heads, FNS[fn], alpha
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if qk_norm:
            self.q_norm, self.k_norm = QKNorm(self.d, qk_norm_bias), QKNorm(self.d, qk_norm_bias)
        else:
            self.q_norm = self.k_norm = None
        self.gate = nn.Linear(dim, dim) if gate else None

    def forward(self, x, H, W):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        attn = self.fn(q @ k.transpose(-1, -2) / self.d ** 0.5) * N ** (-self.alpha)
        out = (attn @ v).transpose(1, 2).reshape(B, N, C)
        if self.gate is not None:
            out = out * self.gate(x)
        return self.proj(out)


def build(case):
    a = case["attention"]
    return ReluAttention(case["dim"], case["num_heads"], a.get("fn", "relu"), a.get("alpha", 1.0),
                         a.get("qk_norm", False), a.get("qk_norm_bias", True), a.get("gate", False))


def case(name, attention, dim=32, heads=2, batch=2, tokens=17):
    return {"name": name, "attention": {"type": "relu", **attention}, "dim": dim, "num_heads": heads,
            "batch": batch, "tokens": tokens, "grid": None, "build": build}


CASES = [
    case("relu_plain", {}),
    case("relu_qk_norm_paper", {"qk_norm": True, "qk_norm_bias": False}),
    case("relu_qk_norm_timm", {"qk_norm": True}),
    case("relu_gate", {"gate": True}, dim=16, heads=1, tokens=9),
    case("relu_qk_norm_gate", {"qk_norm": True, "qk_norm_bias": False, "gate": True}),
    case("relu2_alpha_half", {"fn": "relu2", "alpha": 0.5}, dim=24, heads=3, tokens=10),
]
