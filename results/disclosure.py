"""Claim 5's disclosure column: for each DeiT row of the comparison, where the paper's Table 2 row
comes from and how what this row runs differs from it.

This study's side is read, not typed: the row's config (configs/paper/<row>.json), the defaults of
every option the config leaves unset (the defaults its variant's row declares in
nn/attention/variant_rows.cpp) and the image and patch size behind the model's name (models/registry.cpp).
The rules that turn an option into a count (Linformer's k = N / 4 when proj_len is 0, Performer's
m = int(d ln d) when nb_features is 0, SOFT's landmark grid) are those of the variants' code, named
where each is used.

The paper's side is stated in PAPER_ARCH and PAPER_SOURCE: the SimA paper's Table 2 takes its
Linformer, Performer, Nyströmformer and SOFT rows from the SOFT paper, whose ImageNet models are a
four-stage pyramid (fudan-zvg/SOFT, models/softmax_free_vision_transformer.py: SOFT attention in its
first three stages, ordinary softmax attention in its last, block4, at 7×7 tokens and a class
token); its Efficient Attention and CosFormer rows from XCiT-S12/16; SimA and softmax from DeiT-S
(SimA also from XCiT-S12/16). CosFormer's row there runs without the cos re-weighting: the paper's
footnote says the re-weighted form did not converge on images."""
import json
import math
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASS_TOKENS = 1  # DeiT prepends one class token (models/deit.cpp: N = grid² + 1 when not distilled)

PAPER_ARCH = {
    "DeiT-S": "224 px, patch 16: 14×14 + class token = 197 tokens, 12 blocks, 384 wide, 6 heads",
    "XCiT-S12/16": ("224 px, patch 16: 14×14 = 196 tokens through 12 blocks, 384 wide, 8 heads, then 2"
                    " class-attention blocks that add the class token"),
    "SOFT's pyramid": ("224 px, four stages on grids of 56×56, 28×28, 14×14 and 7×7 tokens (3136, 784, 196,"
                       " 49 + class token); the official code runs SOFT's attention in the first three and"
                       " ordinary softmax attention in the last (block4)"),
}
# Each row's Table 2 source: (the architecture its figure was measured on, a remark), or (None, the
# reason it has no figure beside it).
PAPER_SOURCE = {
    "deit_softmax": ("DeiT-S", None),
    "deit_sima": ("DeiT-S", "(and XCiT-S12/16)"),
    "deit_soft": ("SOFT's pyramid", None),
    "deit_linformer": ("SOFT's pyramid", None),
    "deit_performer": ("SOFT's pyramid", None),
    "deit_nystromformer": ("SOFT's pyramid", None),
    "deit_efficient": ("XCiT-S12/16", None),
    "deit_cosformer": ("XCiT-S12/16", None),
    "deit_cosformer_cos1d": (None, "no Table 2 figure: the paper's re-weighted run did not converge"),
    "deit_relu_attn": (None, "no Table 2 row named by this study"),
    "deit_linear_elu": (None, "no Table 2 row named by this study (a Table 3 speed baseline)"),
}
SHORT_ARCH = {"DeiT-S": "DeiT-S, 197 tokens", "XCiT-S12/16": "XCiT-S12/16, 196 tokens",
              "SOFT's pyramid": "SOFT's pyramid, 3136 to 50 tokens by stage"}
TYPES = {"int64_t": int, "float": lambda s: float(s.rstrip("f")), "bool": lambda s: s == "true",
         "std::string": lambda s: s.strip('"')}


# own_option<T>("key", default, ... and float_option("key", default, ... in the rows.
OPTION = re.compile(r'(?:own_option<(int64_t|float|bool|std::string)>|(float)_option)\(\s*"(\w+)",\s*("[^"]*"|[^,]+),')


def option_defaults(root):
    """{option: default} from the option declarations of the variant rows in nn/attention/variant_rows.cpp."""
    with open(os.path.join(root, "nn", "attention", "variant_rows.cpp")) as f:
        text = f.read()
    out = {}
    for m in OPTION.finditer(text):
        out[m.group(3)] = TYPES[m.group(1) or m.group(2)](m.group(4).strip())
    return out


def geometry(root, name):
    """(patch, image size) of a registry model built by deit(D, heads, patch, img) in models/registry.cpp."""
    with open(os.path.join(root, "models", "registry.cpp")) as f:
        text = f.read()
    m = re.search(r'\{"%s",\s*\[\]\s*\{\s*return\s+(?:small\()?deit\((\d+),\s*(\d+),\s*(\d+),\s*(\d+)\)'
                  % re.escape(name), text)
    if not m:
        raise ValueError("models/registry.cpp builds no DeiT named %s" % name)
    return int(m.group(3)), int(m.group(4))


def row_facts(root, row):
    """What a claim-5 row runs: its token grid, widths and its attention's options, the unset ones at
    their defaults, with the counts its variant derives from them."""
    with open(os.path.join(root, "configs", "paper", row + ".json")) as f:
        model = json.load(f)["model"]
    patch, img = geometry(root, model["name"])
    att = dict(model.get("attention", {}))
    opts = option_defaults(root)
    opts.update({k: v for k, v in att.items() if k != "type"})
    grid = img // patch
    f = {"row": row, "variant": att.get("type", "softmax"), "set": sorted(k for k in att if k != "type"),
         "opts": opts, "img": img, "patch": patch, "grid": grid, "tokens": grid * grid + CLASS_TOKENS,
         "depth": model["depth"], "width": model["embed_dim"], "heads": model["num_heads"]}
    f["d"] = f["width"] // f["heads"]
    # linformer.cpp: proj_len 0 means max(1, num_tokens / 4)
    f["linformer_k"] = opts["proj_len"] or max(1, f["tokens"] // 4)
    # performer.cpp performer_default_features: nb_features 0 means max(1, int(d ln d))
    f["performer_m"] = opts["nb_features"] or max(1, int(f["d"] * math.log(f["d"])))
    # soft_gaussian.cpp: a conv of kernel = stride sr over the grid, so (grid // sr)² landmarks
    per = grid // opts["sr"]
    f["soft_landmarks"], f["soft_per_side"], f["soft_uncovered"] = per * per, per, grid - per * opts["sr"]
    return f


def common_line(facts):
    """The sentence every row shares (what differs between rows goes in the rows' cells)."""
    f = facts[0]
    same = all((g["img"], g["patch"], g["depth"], g["width"], g["heads"]) ==
               (f["img"], f["patch"], f["depth"], f["width"], f["heads"]) for g in facts)
    what = ("%d px images, patch %d, so %d×%d tokens + a class token = %d tokens, %d blocks, %d wide, %d heads"
            " (d = %d)" % (f["img"], f["patch"], f["grid"], f["grid"], f["tokens"], f["depth"], f["width"],
                           f["heads"], f["d"]))
    return ("Every row here is %s: %s, read from its config (`configs/paper/<row>.json`) with the options it"
            " leaves unset at their defaults (`nn/attention/variant_rows.cpp`)." %
            ("the same DeiT" if same else "a DeiT (rows differ; see their configs)", what))


def cell(f):
    """The table's short cell: the paper row's architecture and this row's telling count."""
    arch, remark = PAPER_SOURCE.get(f["row"], (None, "no Table 2 row named by this study"))
    head = (SHORT_ARCH[arch] + (" " + remark if remark else "")) if arch else remark
    extra = {
        "soft": "here SOFT in every block at %d×%d + class (official: softmax there), %d landmarks" % (
            f["grid"], f["grid"], f["soft_landmarks"]),
        "performer": "m = %d random features" % f["performer_m"],
        "nystromformer": "%d landmarks" % f["opts"]["num_landmarks"],
        "linformer": "k = %d" % f["linformer_k"],
        "efficient": "qkv Linear for its 1×1 convs",
        "relu": "qk-LayerNorm, scores × N^-%g" % f["opts"]["alpha"],
    }.get(f["variant"], "")
    if f["variant"] == "cosformer":
        extra = "re-weighting: %s" % f["opts"]["reweight"]
    return head + ("; " + extra if extra else "")


def soft_note(f):
    o, g, per = f["opts"], f["grid"], f["soft_per_side"]
    left = ("row and column %d of the grid never enter a landmark" % g if f["soft_uncovered"] == 1 else
            "the last %d rows and columns never enter a landmark" % f["soft_uncovered"] if f["soft_uncovered"] else
            "every grid token enters a landmark")
    return ("**SOFT**: every one of the %d blocks runs SOFT's attention on %d×%d tokens + the class token, the"
            " stage where the official model runs softmax; SOFT there works on the 56×56, 28×28 and 14×14 grids."
            " Its landmarks come from a convolution of kernel and stride sr = %d, so %d×%d = %d landmarks here:"
            " the windows cover rows and columns 1 to %d, so %s, and the class token (a query and key like the"
            " others) is in none. The depthwise convolution on v is %d×%d here; the official stages use 9, 5"
            " and 3. The official rule is the option `softmax_max_tokens` (docs/attention.md): set to %d, the"
            " tokens of every block here, it makes each block a softmax layer, weight for weight the softmax"
            " row's model from the same seed (tests/models/test_deit.cpp), so SOFT as the official vision model"
            " runs it is, at this token count, the softmax row above; this row keeps SOFT in every block"
            " (the option at 0) to measure SOFT's attention itself." % (
                f["depth"], g, g, o["sr"], per, per, f["soft_landmarks"], per * o["sr"], left, o["v_conv"],
                o["v_conv"], f["tokens"]))


def nystrom_note(f):
    m, n = f["opts"]["num_landmarks"], f["tokens"]
    seg = ("%d segments of %d tokens" % (m, n // m) if n % m == 0 else
           "%d segments of %d or %d tokens" % (m, n // m, n // m + 1))
    return ("**Nyströmformer**: %d landmarks (%s), the means of %s, the class token in the first; the"
            " pseudo-inverse takes %d iterations; no convolution skip on v (`conv_kernel_size` %d), which the"
            " official code offers." % (m, "set by the config" if "num_landmarks" in f["set"] else "the default",
                                         seg, f["opts"]["pinv_iters"], f["opts"]["conv_kernel_size"]))


def notes(facts):
    """The list under the table: the paper rows' architectures, then each variant's details."""
    by = {f["variant"] + ("_" + f["opts"]["reweight"] if f["variant"] == "cosformer" else ""): f for f in facts}
    out = ["- **The paper's rows** ran on: " + "; ".join("%s (%s)" % (a, PAPER_ARCH[a]) for a in PAPER_ARCH) + "."]
    if "soft" in by:
        out.append("- " + soft_note(by["soft"]))
    if "performer" in by:
        f = by["performer"]
        out.append("- **Performer**: m = %d random features for N = %d tokens (d = %d; with `nb_features` unset,"
                   " int(d ln d), the default of the PyTorch port it follows), drawn again every %d training"
                   " calls." % (f["performer_m"], f["tokens"], f["d"], f["opts"]["redraw_interval"]))
    if "nystromformer" in by:
        out.append("- " + nystrom_note(by["nystromformer"]))
    if "linformer" in by:
        f = by["linformer"]
        out.append("- **Linformer**: keys and values projected from N = %d to k = %d (with `proj_len` unset,"
                   " N / 4, fairseq's default ratio), one projection pair shared by the heads (`sharing` %s),"
                   " applied after the qkv Linear (`compress` %s; fairseq compresses the input first)."
                   % (f["tokens"], f["linformer_k"], f["opts"]["sharing"], f["opts"]["compress"]))
    if "efficient" in by:
        out.append("- **Efficient Attention**: the official module makes q, k and v with 1×1 convolutions and adds"
                   " its own residual; here the shared qkv and proj Linears (the same map on every token) and the"
                   " block's residual.")
    if "cosformer_none" in by or "cosformer_cos1d" in by:
        out.append("- **CosFormer**: the paper's row is CosFormer without its cos re-weighting (φ = ReLU only),"
                   " which the `none` row runs too; the `cos1d` row runs the official re-weighting over the %d"
                   " flattened tokens, the form the paper's footnote says did not converge on images, so Table 2"
                   " has no figure for it." % facts[0]["tokens"])
    if "relu" in by or "linear_elu" in by:
        out.append("- **ReLU and linear ELU+1**: this study names no Table 2 row for them. ReLU: scores through"
                   " ReLU times N^-%g, q and k each through a LayerNorm%s; linear: φ = elu + 1, the context"
                   " matrix first." % (by["relu"]["opts"]["alpha"] if "relu" in by else 1,
                                       " without bias" if "relu" in by and not by["relu"]["opts"]["qk_norm_bias"]
                                       else ""))
    return out
