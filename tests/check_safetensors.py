#!/usr/bin/env python3
"""Reads files qkv wrote, with nothing but the standard library (json + struct),
following the safetensors layout: an 8-byte little-endian header length, a JSON
header, then raw little-endian data.

usage: check_safetensors.py SAMPLE CHECKPOINT
  SAMPLE      from `resume_check --sample`: tensors of known values
  CHECKPOINT  a GPT training checkpoint: names and shapes must follow its config
"""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8), "BOOL": ("?", 1)}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        code, size = FORMATS[entry["dtype"]]
        begin, end = entry["data_offsets"]
        count = 1
        for s in entry["shape"]:
            count *= s
        assert end - begin == count * size, f"{name}: {end - begin} bytes for {count} x {size}"
        values = list(struct.unpack("<%d%s" % (count, code), data[begin:end]))
        tensors[name] = (entry["dtype"], entry["shape"], values)
    return tensors, metadata


def check_sample(path):
    tensors, metadata = read(path)
    assert metadata == {"purpose": "check_safetensors.py"}, metadata
    assert tensors["f32"] == ("F32", [2, 3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), tensors["f32"]
    assert tensors["f64"] == ("F64", [4], [-1.0, -0.5, 0.0, 0.5]), tensors["f64"]
    assert tensors["i64"] == ("I64", [3], [-3, 0, 1 << 40]), tensors["i64"]
    assert tensors["mask"] == ("BOOL", [2], [True, False]), tensors["mask"]


def check_gpt(path):
    tensors, metadata = read(path)
    config = {k: int(v) for k, v in json.loads(metadata["qkv.config"]).items()}
    V, T, C = config["vocab"], config["context"], config["width"]
    want = {"tok_emb.weight": [V, C], "pos_emb.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(config["layers"]):
        b = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            want[b + ln + ".weight"] = [C]
            want[b + ln + ".bias"] = [C]
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            want[b + "attn." + proj + ".weight"] = [C, C]
            want[b + "attn." + proj + ".bias"] = [C]
        want[b + "mlp.fc1.weight"] = [4 * C, C]
        want[b + "mlp.fc1.bias"] = [4 * C]
        want[b + "mlp.fc2.weight"] = [C, 4 * C]
        want[b + "mlp.fc2.bias"] = [C]
    params = {n: t for n, t in tensors.items() if not n.startswith("optimizer.")}
    assert set(params) == set(want), sorted(set(params) ^ set(want))
    for name, shape in want.items():
        dtype, got, values = params[name]
        assert dtype == "F32" and got == shape, f"{name}: {dtype} {got}, expected F32 {shape}"
        assert all(v == v for v in values), f"{name} holds NaN"
    ln = params["blocks.0.ln1.weight"][2]
    assert any(abs(v - 1.0) > 1e-6 for v in ln), "trained LayerNorm weights should have moved from 1"
    assert int(metadata["qkv.step"]) > 0 and metadata["qkv.optimizer"] == "adamw", metadata
    for name in want:
        # softmax attention's key biases get an exact zero gradient, so AdamW
        # never steps them and keeps no moments for them
        if name.endswith("k_proj.bias"):
            assert f"optimizer.{name}.exp_avg" not in tensors, name
            continue
        for moment in ("exp_avg", "exp_avg_sq"):
            assert tensors[f"optimizer.{name}.{moment}"][1] == want[name], name


if __name__ == "__main__":
    check_sample(sys.argv[1])
    check_gpt(sys.argv[2])
    print("check_safetensors.py: sample and GPT checkpoint read with json + struct: ok")
