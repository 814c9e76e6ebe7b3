"""softmax: timm's Attention (pytorch-image-models, timm/models/vision_transformer.py,
class Attention), the ViT / DeiT multi-head self-attention.

  qkv = Linear(C, 3C)(x) -> (B, N, 3, h, d) -> q, k, v (B, h, N, d)
  attn = softmax(q kᵀ · d^-½) over the keys;  o = attn v -> (B, N, C) -> proj
"""
import torch
import torch.nn as nn


class TimmAttention(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


def build(case):
    return TimmAttention(case["dim"], case["num_heads"])


CASES = [
    {"name": "softmax_deit", "attention": {"type": "softmax"}, "dim": 24, "num_heads": 3,
     "batch": 2, "tokens": 17, "grid": [4, 4], "build": build},
    {"name": "softmax_one_head_train", "attention": {"type": "softmax"}, "dim": 8, "num_heads": 1,
     "batch": 1, "tokens": 9, "grid": None, "mode": "train", "build": build},
]
