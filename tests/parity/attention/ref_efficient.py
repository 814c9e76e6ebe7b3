"""PyTorch reference of sima.cpp's `efficient` attention (nn/attention/efficient.{h,cpp}).

Efficient Attention, Shen et al., "Efficient Attention: Attention with Linear Complexities"
(WACV 2021). The math below is transcribed from the official module (repository
cmsflash/efficient-attention, file efficient_attention.py, class EfficientAttention) in its own
channel-first layout (B, channels, positions):
  per head, the keys are softmaxed over the positions, the queries over the head's channels,
  context = keys @ valuesᵀ (d_k, d_v), output = contextᵀ @ queries (d_v, positions); no scale;
  the heads are concatenated along the channels.
Two deliberate differences, the same as in sima.cpp (docs/derivations/efficient.md):
  - queries, keys and values come from one qkv Linear(C, 3C) (timm's layout, state-dict names
    qkv.weight / qkv.bias) instead of three 1x1 convolutions, and the output projection is
    proj = Linear(C, C) instead of the 1x1 `reprojection` conv: the same per-token maps;
  - the official module returns `reprojected + input`; here, as in every sima.cpp attention,
    the residual belongs to the transformer block, so the module returns the projection alone.

For the attention parity harness: CASES lists the cases; build(case) returns the module, which
maps (x (B, N, C), H, W) to (B, N, C).
"""
import torch
from torch import nn


class EfficientAttentionRef(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        assert dim % num_heads == 0
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H=None, W=None):
        B, N, C = x.shape
        h, d = self.num_heads, C // self.num_heads
        qkv = self.qkv(x).reshape(B, N, 3, h, d).permute(2, 0, 3, 4, 1)  # (3, B, h, d, N): channel-first
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        key = keys.softmax(dim=-1)      # over the N positions (the official dim=2 of (n, d_k, h·w))
        query = queries.softmax(dim=-2)  # over the head's d channels (the official dim=1)
        context = key @ values.transpose(-1, -2)       # (B, h, d_k, d_v)
        attended = context.transpose(-1, -2) @ query   # (B, h, d_v, N)
        out = attended.reshape(B, C, N).transpose(1, 2)  # heads concatenated along the channels
        return self.proj(out)


def build(case):
    return EfficientAttentionRef(case["dim"], case["num_heads"])


def _case(name, dim, heads, batch, tokens, grid):
    return {"name": name, "attention": {"type": "efficient"}, "dim": dim, "num_heads": heads, "batch": batch,
            "tokens": tokens, "grid": grid, "mode": "eval", "build": build}


CASES = [
    _case("efficient_multihead", 16, 2, 2, 10, None),
    _case("efficient_cls_grid", 24, 3, 2, 17, [4, 4]),   # N > d
    _case("efficient_one_head_n_lt_d", 12, 1, 1, 5, None),  # N < d
]
