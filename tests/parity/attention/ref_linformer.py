"""PyTorch reference of sima.cpp's `linformer` attention (nn/attention/linformer.{h,cpp}).

Linformer, Wang et al., "Linformer: Self-Attention with Linear Complexity" (2020). The math is
transcribed from the official code (fairseq, examples/linformer/linformer_src/modules/
multihead_linear_attention.py, class MultiheadLinearAttention, self-attention path):
  compress_k = Linear(max_seq_len, k, bias=False) applied along the token axis of a (B, C, T)
  tensor, compress_v likewise (or compress_k again with shared_kv_compressed = 1), one map for
  all heads; q scaled by head_dim^-1/2; softmax over the k compressed keys; dropout on the
  probabilities (the cases here run in eval mode); out_proj.
Where E and F act is the option `compress`, as in sima.cpp:
  - "input" is fairseq's order, transcribed as it is: the block input x (as (B, C, T)) is
    compressed by F.linear with compress_k.weight, then k_proj (with its bias) is applied;
  - "kv" (sima.cpp's default) compresses k and v after the projection, as lucidrains/linformer
    and the paper's E·(X W^K): the qkv bias then goes through E as well. Without a qkv bias the
    two are the same function.
Other deliberate differences, the same as in sima.cpp (docs/derivations/linformer.md):
  - fairseq slices E[:, :T] for a shorter sequence; sima.cpp and this module require T = N;
  - q, k, v come from one qkv Linear(C, 3C) and the output from proj (timm's names); the
    compression maps keep fairseq's names, compress_k.weight and compress_v.weight (k, N);
  - sharing = "none" (an E_i, F_i per head, the paper's general form) stores (h, k, N) weights.

For the attention parity harness: CASES lists the cases; build(case) returns the module, which
maps (x (B, N, C), H, W) to (B, N, C).
"""
import torch
import torch.nn.functional as F
from torch import nn


class _PerHeadMap(nn.Module):  # compress_k / compress_v with sharing = "none": weight (h, k, N)
    def __init__(self, heads, k, n):
        super().__init__()
        bound = 2 ** -0.5 * (6.0 / (k + n)) ** 0.5  # fairseq's xavier_uniform_(gain=1/√2) of a (k, N) map
        self.weight = nn.Parameter(torch.empty(heads, k, n).uniform_(-bound, bound))


class LinformerAttentionRef(nn.Module):
    def __init__(self, dim, num_heads, num_tokens, proj_len=0, sharing="headwise", compress="kv", qkv_bias=True):
        super().__init__()
        assert dim % num_heads == 0 and sharing in ("headwise", "kv", "none") and compress in ("kv", "input")
        assert compress == "kv" or sharing != "none"
        self.num_heads, self.num_tokens, self.sharing, self.compress = num_heads, num_tokens, sharing, compress
        k = proj_len if proj_len > 0 else max(1, num_tokens // 4)  # fairseq: max_seq_len // compressed (4)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        if sharing == "none":
            self.compress_k = _PerHeadMap(num_heads, k, num_tokens)
            self.compress_v = _PerHeadMap(num_heads, k, num_tokens)
        else:
            self.compress_k = nn.Linear(num_tokens, k, bias=False)
            if sharing == "headwise":
                self.compress_v = nn.Linear(num_tokens, k, bias=False)
        self.proj = nn.Linear(dim, dim)

    def _compress(self, t, layer):
        # t (B, h, N, d) -> (B, h, k, d)
        B, h, N, d = t.shape
        if self.sharing == "none":
            return torch.einsum("hkn,bhnd->bhkd", layer.weight, t)
        t_in = t.permute(0, 1, 3, 2).reshape(B, h * d, N)  # fairseq's (B, C, T) input to the compression
        return F.linear(t_in, layer.weight).reshape(B, h, d, -1).transpose(-1, -2)

    def forward(self, x, H=None, W=None):
        B, N, C = x.shape
        assert N == self.num_tokens, f"built for {self.num_tokens} tokens, got {N}"
        h, d = self.num_heads, C // self.num_heads
        map_v = self.compress_k if self.sharing == "kv" else self.compress_v
        if self.compress == "input":  # fairseq: q_proj(x); k_proj(compress_k(x)); v_proj(compress_v(x))
            w_q, w_k, w_v = self.qkv.weight.chunk(3)
            b_q, b_k, b_v = self.qkv.bias.chunk(3)
            x_in = x.permute(0, 2, 1)  # (B, C, T)
            k_in = F.linear(x_in, self.compress_k.weight).permute(0, 2, 1)  # (B, k, C)
            v_in = F.linear(x_in, map_v.weight).permute(0, 2, 1)
            heads = lambda t: t.reshape(B, t.shape[1], h, d).transpose(1, 2)
            q, k, v = heads(F.linear(x, w_q, b_q)), heads(F.linear(k_in, w_k, b_k)), heads(F.linear(v_in, w_v, b_v))
        else:
            q, k, v = self.qkv(x).reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4)  # (B, h, N, d) each
            k, v = self._compress(k, self.compress_k), self._compress(v, map_v)
        q = q * d ** -0.5
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)  # (B, h, N, k)
        out = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(out)


def build(case):
    a = case["attention"]
    return LinformerAttentionRef(case["dim"], case["num_heads"], case["tokens"], a.get("proj_len", 0),
                                 a.get("sharing", "headwise"), a.get("compress", "kv"))


def _case(name, dim, heads, batch, tokens, grid, **attention):
    return {"name": name, "attention": dict(type="linformer", **attention), "dim": dim,
            "num_heads": heads, "batch": batch, "tokens": tokens, "grid": grid, "mode": "eval", "build": build}


CASES = [
    _case("linformer_headwise", 16, 2, 2, 10, None, proj_len=4),
    _case("linformer_default_len_cls_grid", 24, 3, 2, 17, [4, 4]),  # proj_len 0 -> 17 // 4 = 4
    _case("linformer_kv_shared", 16, 2, 2, 9, [3, 3], proj_len=3, sharing="kv"),
    _case("linformer_per_head", 12, 3, 1, 8, None, proj_len=5, sharing="none"),
    _case("linformer_fairseq_order", 16, 2, 2, 10, None, proj_len=4, compress="input"),
    _case("linformer_fairseq_order_kv_shared", 24, 3, 1, 17, [4, 4], sharing="kv", compress="input"),
]
