#!/usr/bin/env python3
"""safetensors files between sima.cpp and Python, run by tests/models/test_safetensors.cpp.

  read_safetensors.py check FILE EXPECTED.json
      Parses FILE, written by sima.cpp, with the standard library only (struct, json):
      the 8-byte little-endian header length, the JSON header, the data buffer; checks the
      layout our writer promises (header padded with spaces to 8 bytes, no duplicate keys,
      tensors sorted by name and tiling the buffer) and every name, shape, float32 bit
      pattern and metadata entry against EXPECTED.json. Then loads each tensor into PyTorch
      with torch.frombuffer (the `safetensors` package is not needed) and checks it again.

  read_safetensors.py write FILE EXPECTED.json
      Writes F32, F16 and BF16 tensors made by PyTorch in a layout of its own (pretty JSON,
      no padding, data not in name order, __metadata__ last) and, in EXPECTED.json, their
      values converted to float32 by PyTorch, for the C++ side to read and compare.

Several commands may be given in a row ("check F E write F2 E2"). Exit status 0 when
everything matches; a failed check raises and exits non-zero.
"""
import json
import math
import struct
import sys


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate keys in the header: {keys}")
    return dict(pairs)


def parse(path):
    """Returns (tensors in header order as (name, dtype, shape, data bytes), metadata, header text)."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) >= 8, f"{path}: {len(raw)} bytes"
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), f"header length {n} past the end"
    text = raw[8 : 8 + n].decode("utf-8")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    metadata = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in metadata.values())
    data = raw[8 + n :]
    tensors = []
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        tensors.append((name, dtype, shape, begin, end))
    # The tensors tile the data buffer exactly.
    pos = 0
    for name, dtype, shape, begin, end in sorted(tensors, key=lambda t: (t[3], t[4])):
        assert begin == pos, f"{name}: begins at {begin}, expected {pos}"
        assert end - begin == math.prod(shape) * {"F32": 4, "F16": 2, "BF16": 2}[dtype], name
        pos = end
    assert pos == len(data), f"{len(data) - pos} bytes after the last tensor"
    return [(nm, dt, sh, data[b:e]) for nm, dt, sh, b, e in tensors], metadata, text


def check(path, expected_path):
    with open(expected_path) as f:
        expected = json.load(f)
    tensors, metadata, text = parse(path)

    # The layout our writer promises.
    assert (8 + len(text.encode("utf-8"))) % 8 == 0 and len(text.encode("utf-8")) % 8 == 0
    assert text == text.rstrip(" ") + " " * (len(text) - len(text.rstrip(" "))), "padding is not spaces"
    assert text.rstrip(" ").endswith("}") and text.startswith("{")
    if metadata:
        assert text.startswith('{"__metadata__":'), "__metadata__ is not first"
    names = [t[0] for t in tensors]
    assert names == sorted(names, key=lambda s: s.encode("utf-8")), f"not sorted by name: {names}"
    offsets = [json.loads(text)[nm]["data_offsets"][0] for nm in names]
    assert offsets == sorted(offsets), "header order is not data order"

    assert metadata == expected["metadata"], (metadata, expected["metadata"])
    want = expected["tensors"]
    assert sorted(names) == sorted(want), (names, list(want))
    for name, dtype, shape, data in tensors:
        assert dtype == "F32", (name, dtype)
        assert shape == want[name]["shape"], (name, shape, want[name]["shape"])
        got = list(struct.unpack(f"<{len(data) // 4}I", data))
        assert got == want[name]["bits"], f"{name}: values differ"
    print(f"struct/json: {len(tensors)} tensors, {len(metadata)} metadata entries match")

    import torch

    for name, dtype, shape, data in tensors:
        if len(data) == 0:  # torch.frombuffer refuses an empty buffer
            t = torch.empty(shape, dtype=torch.float32)
        else:
            t = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
        assert list(t.shape) == want[name]["shape"]
        signed = [b - (1 << 32) if b >= (1 << 31) else b for b in want[name]["bits"]]
        expect = torch.tensor(signed, dtype=torch.int32).reshape(shape)
        assert torch.equal(t.view(torch.int32), expect), f"torch: {name} differs"
        if t.numel() and torch.isfinite(t).all():
            assert torch.equal(t, expect.view(torch.float32))
    print(f"torch {torch.__version__}: {len(tensors)} tensors match bit for bit")


def write(path, expected_path):
    import torch

    base = torch.linspace(-3.0, 3.0, 12, dtype=torch.float32).reshape(3, 4)
    special = torch.tensor([float("inf"), -0.0, 6e-8, 65504.0, 1.0 / 3.0])  # 6e-8: an F16 subnormal
    tensors = {
        "w_f32": (base, "F32", torch.int32, "i"),
        "w_f16": (base.to(torch.float16), "F16", torch.int16, "h"),
        "w_bf16": (base.to(torch.bfloat16), "BF16", torch.int16, "h"),
        "special_f16": (special.to(torch.float16), "F16", torch.int16, "h"),
        "special_bf16": (special.to(torch.bfloat16), "BF16", torch.int16, "h"),
        "scalar": (torch.tensor(2.75), "F32", torch.int32, "i"),
        "empty": (torch.zeros(0, 2), "F32", torch.int32, "i"),
    }
    header, chunks, pos = {}, [], 0
    for name in reversed(list(tensors)):  # data in reverse name-insertion order
        t, dtype, int_type, fmt = tensors[name]
        ints = t.contiguous().view(int_type).flatten().tolist()
        blob = struct.pack(f"<{len(ints)}{fmt}", *ints)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [pos, pos + len(blob)]}
        chunks.append(blob)
        pos += len(blob)
    metadata = {"writer": "torch " + torch.__version__, "format": "pt"}
    header["__metadata__"] = metadata
    text = json.dumps(header, indent=1).encode("utf-8")  # pretty, unpadded
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))

    expected = {"metadata": metadata, "tensors": {}}
    for name, (t, *_rest) in tensors.items():
        f32 = t.to(torch.float32).contiguous().view(torch.int32).flatten().tolist()
        expected["tensors"][name] = {"shape": list(t.shape), "bits": [b & 0xFFFFFFFF for b in f32]}
    with open(expected_path, "w") as f:
        json.dump(expected, f)
    print(f"wrote {len(tensors)} tensors to {path}")


if __name__ == "__main__":
    # Several commands may follow one another (PyTorch is slow to import, so import it once).
    args = sys.argv[1:]
    if not args or len(args) % 3 or any(c not in ("check", "write") for c in args[::3]):
        sys.exit(__doc__)
    for i in range(0, len(args), 3):
        (check if args[i] == "check" else write)(args[i + 1], args[i + 2])
