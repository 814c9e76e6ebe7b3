#!/usr/bin/env python3
"""The hash train.test_train_precision compares fp32 runs with: FNV-1a (64 bits) over the step
losses of RUN/metrics.jsonl (float64, little-endian, in step order; the run must log every step)
and then every tensor of RUN/model.safetensors in name order (raw little-endian float32 bytes).

  python3 tests/train/precision_hash.py RUN_FOLDER
"""
import json, struct, sys


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    run = sys.argv[1]
    steps = {}
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "step":
                steps[r["step"]] = r["loss"]
    h = 1469598103934665603
    h = fnv(h, b"".join(struct.pack("<d", steps[s]) for s in sorted(steps)))
    with open(f"{run}/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    for name in sorted(k for k in header if k != "__metadata__"):
        t = header[name]
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        h = fnv(h, data[a:b])
    print(f"0x{h:016x}")


if __name__ == "__main__":
    main()
