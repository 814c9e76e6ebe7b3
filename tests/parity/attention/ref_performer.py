"""performer: FAVOR+ with positive orthogonal random features, the math of the official
google-research/google-research performer/fast_attention/jax/fast_attention.py
(nonnegative_softmax_kernel_feature_creator, FastAttentionviaLowRankDecomposition) as
lucidrains/performer-pytorch performer_pytorch/performer_pytorch.py transcribes it
(softmax_kernel, linear_attention, FastAttention); sima.cpp follows the latter's defaults.

  qkv = Linear(C, 3C)(x) -> q, k, v (B, h, N, d);  W = projection_matrix (m, d)
  s = d^-1/4, r = m^-1/2;  U = (s·x) Wᵀ,  h = s²·|x|²/2 per token
  q' = r·(exp(U − h − max over the features of each row) + eps)
  k' = r·(exp(U − h − max over all tokens and features of each (batch, head)) + eps)
  (both maxima detached, eps = 1e-4 as lucidrains' softmax_kernel)
  o = (q' (k'ᵀ v)) / (q' (k'ᵀ 1)) -> (B, N, C) -> proj

Only the eval forward is transcribed: the projection matrix is a buffer loaded from the
case's state (the harness fills it like every other float tensor); the three counters
sima.cpp keeps as buffers (calls_since_last_redraw, redraw_count, module_seed) are here so
that the state dicts have the same names, and are unused in eval.
"""
import math

import torch
import torch.nn as nn


def default_features(d):
    return max(1, int(d * math.log(d)))  # lucidrains FastAttention: int(dim_heads * ln(dim_heads))


def positive_features(x, projection, is_query, eps):
    d, m = x.shape[-1], projection.shape[0]
    s, r = d ** -0.25, m ** -0.5
    u = torch.einsum("bhnd,md->bhnm", s * x, projection)
    h = (x ** 2).sum(dim=-1, keepdim=True) * (s * s) / 2.0
    if is_query:
        c = u.amax(dim=-1, keepdim=True).detach()
    else:
        c = u.amax(dim=(-1, -2), keepdim=True).detach()
    return r * (torch.exp(u - h - c) + eps)


class Performer(nn.Module):
    def __init__(self, dim, num_heads, nb_features=0, feature_eps=1e-4, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        d = dim // num_heads
        m = nb_features if nb_features > 0 else default_features(d)
        self.eps = feature_eps
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("projection_matrix", torch.zeros(m, d))
        self.register_buffer("calls_since_last_redraw", torch.zeros(1))
        self.register_buffer("redraw_count", torch.zeros(1))
        self.register_buffer("module_seed", torch.zeros(1))

    def forward(self, x, H, W):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        qf = positive_features(q, self.projection_matrix, True, self.eps)
        kf = positive_features(k, self.projection_matrix, False, self.eps)
        context = torch.einsum("bhnm,bhne->bhme", kf, v)  # k'ᵀ v
        norm = torch.einsum("bhnm,bhm->bhn", qf, kf.sum(dim=-2))  # q' (k'ᵀ 1)
        o = torch.einsum("bhnm,bhme->bhne", qf, context) / norm.unsqueeze(-1)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


def build(case):
    a = case["attention"]
    return Performer(case["dim"], case["num_heads"], a.get("nb_features", 0), a.get("feature_eps", 1e-4))


CASES = [
    # d = 8: the default m = int(8·ln 8) = 16 features, two orthogonal blocks' worth
    {"name": "performer_deit", "attention": {"type": "performer"}, "dim": 24, "num_heads": 3,
     "batch": 2, "tokens": 17, "grid": [4, 4], "build": build},
    {"name": "performer_m5_one_head", "attention": {"type": "performer", "nb_features": 5, "feature_eps": 1e-3},
     "dim": 8, "num_heads": 1, "batch": 1, "tokens": 9, "grid": None, "build": build},
]
