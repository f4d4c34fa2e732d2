#!/usr/bin/env python3
"""Compare two gradient files tensor by tensor: one from `qkv grads`, one
from another framework (or another qkv build) saved as safetensors with the
same names (`loss`, `grad.<parameter>`). Standard library only.

    python3 cli/compare_grads.py qkv_grads.safetensors other.safetensors [--tol 1e-5]

From PyTorch, write the other file with the same names, e.g. after
`loss.backward()` on a model holding qkv's weights:

    from safetensors.torch import save_file
    save_file({"loss": loss.detach().reshape(()),
               **{"grad." + n: p.grad for n, p in model.named_parameters()}}, "other.safetensors")

Prints each tensor's largest absolute difference and the relative one
(max |a - b| / max |a|); exits 1 if any relative difference exceeds --tol.
"""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8)}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        code, size = FORMATS[entry["dtype"]]
        begin, end = entry["data_offsets"]
        count = (end - begin) // size
        out[name] = struct.unpack("<%d%s" % (count, code), data[base + begin:base + end])
    return out


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    tol = float(argv[argv.index("--tol") + 1]) if "--tol" in argv else 1e-5
    if "--tol" in argv:
        args.remove(argv[argv.index("--tol") + 1])
    if len(args) != 2:
        print(__doc__)
        return 2
    a, b = read(args[0]), read(args[1])
    missing = sorted(set(a) ^ set(b))
    if missing:
        print("in one file only:", ", ".join(missing))
    worst = 0.0
    print("%-40s %12s %12s" % ("tensor", "max |a-b|", "relative"))
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if len(x) != len(y):
            print("%-40s sizes differ: %d and %d" % (name, len(x), len(y)))
            worst = float("inf")
            continue
        diff = max((abs(p - q) for p, q in zip(x, y)), default=0.0)
        scale = max((abs(p) for p in x), default=0.0)
        rel = diff / scale if scale > 0 else diff
        worst = max(worst, rel)
        print("%-40s %12.3e %12.3e" % (name, diff, rel))
    ok = worst <= tol and not missing
    print("%s: worst relative difference %.3e (tolerance %.1e)" % ("ok" if ok else "DIFFERENT", worst, tol))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
