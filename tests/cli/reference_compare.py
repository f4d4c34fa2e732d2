#!/usr/bin/env python3
"""Compares two folders of tests/cli/reference_runs.sh: every file the same
but for what measures time. Masked: printed times, rates and ETAs; a log's
tokens_per_s column (and so a checkpoint's digest of its log, and a page's
copy of the log). Everything else, every tensor's bytes included, must match."""
import json
import re
import struct
import sys
from pathlib import Path

TIMES = [(r"[0-9]+ tok/s", "N tok/s"), (r"[0-9.]+ ?(ms|s) elapsed", "T elapsed"), (r"ETA [^ ]+ [0-9.]+m?s", "ETA T"),
         (r"ETA [0-9.]+m?s", "ETA T"), (r"\bin [0-9.]+ ?(ms|s|min)\b", "in T"), (r"[0-9.]+ ?(ms|s)/step", "T/step"),
         (r"took [0-9.]+ ?(ms|s)", "took T")]


def printed(text):
    for pattern, repl in TIMES:
        text = re.sub(pattern, repl, text)
    return text


def safetensors(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.get("__metadata__", {}).pop("qkv.log.digest", None)
    return header, data[8 + n:]


def csv_log(text):
    rows = [line.split(",") for line in text.splitlines()]
    if not rows or "tokens_per_s" not in rows[0]:
        return rows
    at = rows[0].index("tokens_per_s")
    return [row[:at] + row[at + 1:] for row in rows]


def json_log(text):
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        row.pop("tokens_per_s", None)
    return rows


def page(text):  # the log's rates inside a page: the series' values
    return re.sub(r'(tokens_per_s":\{[^}]*"values":)\[[^\]]*\]', r"\1[]", text)


def same(a, b, name):
    if name.endswith(".out"):
        return printed(a.decode()) == printed(b.decode())
    if name.endswith(".safetensors"):
        return safetensors(a) == safetensors(b)
    if name.endswith(".csv"):
        return csv_log(a.decode()) == csv_log(b.decode())
    if name.endswith(".jsonl"):
        return json_log(a.decode()) == json_log(b.decode())
    if name.endswith(".html"):
        return page(a.decode()) == page(b.decode())
    return a == b


def main(before, after):
    before, after = Path(before), Path(after)
    names = sorted(str(p.relative_to(before)) for p in before.rglob("*") if p.is_file())
    extra = sorted(str(p.relative_to(after)) for p in after.rglob("*") if p.is_file() and not (before / p.relative_to(after)).exists())
    bad = [f"only in {after}: {n}" for n in extra]
    for name in names:
        if not (after / name).exists():
            bad.append(f"missing in {after}: {name}")
        elif not same((before / name).read_bytes(), (after / name).read_bytes(), name):
            bad.append(f"differs: {name}")
    for line in bad:
        print(line)
    if not bad:
        print(f"same results: {len(names)} files")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
