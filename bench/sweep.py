#!/usr/bin/env python3
"""Long sequences and memory: the trade-offs of qkv's attention choices, measured.

For n = 256, 512, ..., 16384 it times one causal attention layer (B=1, C=256,
8 heads, projections included, forward + backward) with full, window:128 and
linear attention, each in its own `qkv bench --config layer` process so the
peak resident memory is that run's own; then one GPT training step at T=512,
L=6, C=384, B=4 with and without activation checkpointing. Standard library
only.

    python3 bench/sweep.py [--qkv build/release/qkv] [--max-n 16384] [--threads 2]
"""
import argparse
import re
import subprocess
import sys


def bench(binary, threads, *args):
    out = subprocess.run([binary, "bench", "--threads", str(threads), *args], check=True, capture_output=True,
                         text=True).stdout
    ms = float(re.search(r"median ([0-9.]+) ms/step", out).group(1))
    mib = float(re.search(r"peak resident memory ([0-9.]+) MiB", out).group(1))
    return ms, mib


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qkv", default="build/release/qkv")
    parser.add_argument("--max-n", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    kinds = ["full", "window:128", "linear"]
    print("one causal attention layer, B=1 C=256 8 heads, forward + backward "
          "(ms per step, µs per token, peak MiB)\n")
    print("| n | " + " | ".join(f"{k} ms | {k} µs/token | {k} MiB" for k in kinds) + " |")
    print("| --- |" + " --- | --- | --- |" * len(kinds))
    n = 256
    while n <= args.max_n:
        cells = []
        for kind in kinds:
            steps = "3" if n <= 4096 or kind != "full" else "1"
            ms, mib = bench(args.qkv, args.threads, "--config", "layer", "--context", str(n), "--attention", kind,
                            "--steps", steps, "--warmup", "1" if n <= 4096 else "0")
            cells.append(f"{ms:.1f} | {1000 * ms / n:.1f} | {mib:.0f}")
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
        n *= 2
    print("\nGPT training step, T=512 L=6 C=384 B=4 (ms per step, peak MiB)\n")
    print("| blocks | ms/step | peak MiB |\n| --- | --- | --- |")
    for label, extra in (("stored", []), ("recomputed (--checkpoint-activations)", ["--checkpoint-activations"])):
        ms, mib = bench(args.qkv, args.threads, "--config", "deep", "--steps", "5", "--warmup", "1", *extra)
        print(f"| {label} | {ms:.0f} | {mib:.0f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
