#!/usr/bin/python3
"""qkv sample against a PyTorch loop with a KV cache: GPT-2 small, batch 1.

Writes one random GPT-2 small (124M parameters; weights N(0, 0.02)) as
llm.c's gpt2_124M.bin, which `qkv sample` reads, beside GPT-2's tokenizer
files (from tests/fixtures/gpt2), and loads the same weights into a PyTorch
GPT-2 that keeps each layer's keys and values. Both continue the same
prompt greedily. Each round, in turn:

- qkv: `qkv sample FILE --max-new 1` and `--max-new 1+NEW`, each a fresh
  process (the file in the page cache, as for any second run): the first is
  the time to the first token from a cold start (process, load, prompt,
  one token); NEW over the difference is the tokens/s of generation.
- PyTorch: the prompt, then NEW tokens one at a time from the cache, timed
  after the first (its load and start are not counted).

    /usr/bin/python3 bench/compare_generate.py [--qkv build/release/qkv]
        [--rounds 3] [--new 128] [--threads 2]
    sudo bench/torch2_chroot.sh --generate [ARGS]     (against PyTorch 2.6)

A measuring instrument only: nothing in qkv's build or tests needs it.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

L, H, C, V, VP, MAX_T = 12, 12, 768, 50257, 50304, 1024
PROMPT = "The attention of a transformer reads every earlier token, and"


def write_llmc_checkpoint(torch, path):
    """Random GPT-2 small in llm.c's version-3 layout; returns the tensors by llm.c's order."""
    g = torch.Generator().manual_seed(1)
    normal = lambda *s: torch.randn(*s, generator=g) * 0.02
    t = {"wte": normal(VP, C), "wpe": normal(MAX_T, C), "ln1w": torch.ones(L, C), "ln1b": torch.zeros(L, C),
         "qkvw": normal(L, 3 * C, C), "qkvb": torch.zeros(L, 3 * C), "attprojw": normal(L, C, C),
         "attprojb": torch.zeros(L, C), "ln2w": torch.ones(L, C), "ln2b": torch.zeros(L, C),
         "fcw": normal(L, 4 * C, C), "fcb": torch.zeros(L, 4 * C), "fcprojw": normal(L, C, 4 * C),
         "fcprojb": torch.zeros(L, C), "lnfw": torch.ones(C), "lnfb": torch.zeros(C)}
    t["wte"][V:] = 0  # llm.c's padding rows
    header = torch.zeros(256, dtype=torch.int32)
    header[:8] = torch.tensor([20240326, 3, MAX_T, V, L, H, C, VP])
    with open(path, "wb") as f:
        f.write(header.numpy().tobytes())
        for v in t.values():
            f.write(v.contiguous().numpy().tobytes())
    return t


def torch_gpt2(torch, t):
    """GPT-2 small with a KV cache, on the weights llm.c's layout gives (Linear weights are [out, in])."""
    F = torch.nn.functional

    def step(ids, cache):  # ids [1, n] at positions len(cache) ...; returns the last position's logits
        start = cache[0][0].shape[2] if cache[0] else 0
        n = ids.shape[1]
        x = t["wte"][ids] + t["wpe"][start:start + n]
        for i in range(L):
            h = F.layer_norm(x, (C,), t["ln1w"][i], t["ln1b"][i])
            q, k, v = F.linear(h, t["qkvw"][i], t["qkvb"][i]).view(1, n, 3, H, C // H).permute(2, 0, 3, 1, 4)
            if cache[i]:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
            s = (q @ k.transpose(-1, -2)) / (C // H) ** 0.5
            if n > 1:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            y = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, n, C)
            x = x + F.linear(y, t["attprojw"][i], t["attprojb"][i])
            h = F.layer_norm(x, (C,), t["ln2w"][i], t["ln2b"][i])
            x = x + F.linear(F.gelu(F.linear(h, t["fcw"][i], t["fcb"][i]), approximate="tanh"), t["fcprojw"][i],
                             t["fcprojb"][i])
        return F.layer_norm(x[:, -1], (C,), t["lnfw"], t["lnfb"]) @ t["wte"][:V].t()

    return step


def torch_tokens_per_s(torch, step, prompt_ids, new):
    with torch.no_grad():
        cache = [None] * L
        token = step(torch.tensor([prompt_ids]), cache).argmax(-1, keepdim=True)
        start = time.perf_counter()
        for _ in range(new):
            token = step(token, cache).argmax(-1, keepdim=True)
        return new / (time.perf_counter() - start)


def qkv_seconds(qkv, checkpoint, max_new, threads):
    start = time.perf_counter()
    subprocess.run([qkv, "sample", checkpoint, "--prompt", PROMPT, "--max-new", str(max_new), "--threads",
                    str(threads)], check=True, capture_output=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qkv", default="build/release/qkv", help="the qkv binary")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are taken over them)")
    parser.add_argument("--new", type=int, default=128, help="tokens generated after the first")
    parser.add_argument("--threads", type=int, default=2, help="threads for both")
    parser.add_argument("--folder", help="where to write the model (default: a new temporary folder, removed after)")
    parser.add_argument("--qkv-folder", help="the same folder as qkv sees it (torch2_chroot.sh: qkv runs outside)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_generate: PyTorch is not installed (apt-get install python3-torch; /usr/bin/python3)")
    torch.set_num_threads(args.threads)
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = args.folder or tempfile.mkdtemp(prefix="qkv-generate.")
    os.makedirs(folder, exist_ok=True)
    qkv_folder = args.qkv_folder or folder
    try:
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(top, "tests", "fixtures", "gpt2", name), folder)
        checkpoint = os.path.join(folder, "gpt2_124M.bin")
        qkv_checkpoint = os.path.join(qkv_folder, "gpt2_124M.bin")  # the same file, as qkv sees it
        step = torch_gpt2(torch, write_llmc_checkpoint(torch, checkpoint))
        ids = subprocess.run([args.qkv, "tokenize", "--tokenizer", qkv_folder, "--text", PROMPT], check=True,
                             capture_output=True, text=True).stdout.split()
        prompt_ids = [int(i) for i in ids]
        print(f"GPT-2 small (random weights), batch 1, prompt of {len(prompt_ids)} tokens, {args.new} new tokens, "
              f"{args.threads} threads; torch {torch.__version__}", flush=True)
        first, rates, torch_rates = [], [], []
        for r in range(args.rounds):
            one = qkv_seconds(args.qkv, qkv_checkpoint, 1, args.threads)
            many = qkv_seconds(args.qkv, qkv_checkpoint, 1 + args.new, args.threads)
            t = torch_tokens_per_s(torch, step, prompt_ids, args.new)
            first.append(one), rates.append(args.new / (many - one)), torch_rates.append(t)
            print(f"  round {r + 1}: qkv first token {one:.3f} s, {rates[-1]:.1f} tok/s; PyTorch {t:.1f} tok/s, "
                  f"ratio {rates[-1] / t:.2f}", flush=True)
        ratios = [a / b for a, b in zip(rates, torch_rates)]
        med = statistics.median
        print(f"\n| | qkv | PyTorch (KV cache) | ratio |\n| --- | --- | --- | --- |\n"
              f"| tokens/s, {args.new} new | {med(rates):.1f} | {med(torch_rates):.1f} | {med(ratios):.2f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f}) |\n"
              f"| first token from a cold start | {med(first):.3f} s | | |")
    finally:
        shutil.rmtree(folder) if not args.folder else None


if __name__ == "__main__":
    main()
