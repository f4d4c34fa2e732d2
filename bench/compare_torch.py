#!/usr/bin/python3
"""qkv against PyTorch, side by side: the same GPT training step in both.

Runs only where PyTorch is installed (Debian: apt-get install python3-torch,
then /usr/bin/python3); nothing in qkv's build or test suite needs it.
Debian 12's is 1.13; `sudo bench/torch2_chroot.sh ARGS` runs this script with
ARGS against Debian 13's 2.6, in a chroot.

The model is the GPT of `qkv bench`: pre-LN blocks, causal multi-head
attention, GELU-tanh MLP, tied head, vocab 256 (50,257 for gpt2 and
gpt2-1k, GPT-2 small's shape), AdamW lr 1e-4, clipping at 1.0, dropout 0,
random tokens. PyTorch runs its best eager path where it has
one: F.scaled_dot_product_attention(is_causal=True) and AdamW(fused=True)
on PyTorch 2.x; on 1.13 (no fused attention for training, no fused CPU
AdamW) attention is written out (q·kᵀ/√d, masked softmax, ·v) and AdamW is
the default. Each round times one qkv run (`qkv bench`, its own process)
and then the same number of PyTorch steps, so machine noise hits both
alike; the table gives medians over rounds, one row per config and thread
count.

    /usr/bin/python3 bench/compare_torch.py [--qkv build/release/qkv]
        [--configs tiny,small,mini] [--rounds 5] [--steps 10] [--threads 1,2,4,8,16]
        [--device cpu|cuda] [--context N]

--baseline OLD_QKV times a second qkv binary in the same rounds (an older
build: before and after a change, side by side with PyTorch). Peak resident
memory is each qkv run's own (qkv bench prints it) and, for PyTorch, the
script's process so far: a config's PyTorch figure is its own only when it
runs alone or is the largest run yet.

--device cuda runs both on the GPU (a qkv built with -DQKV_CUDA=ON), in
float32 with TF32 off on both sides, each step waited for before it is
timed. The config `attention` times causal attention alone, forward and
backward of q, k, v [B, n, heads, d] (qkv's fused kernel; PyTorch's SDPA);
--context sets its n (or any config's context).

Set OPENBLAS_CORETYPE (e.g. Haswell) in the environment to pin both systems'
BLAS kernels: qkv's OpenBLAS reads it, and so does PyTorch's (Debian's torch
links the system's OpenBLAS: the same one, or 0.3.29 in the chroot). Left unset, qkv replaces OpenBLAS's fallback
kernels on a CPU OpenBLAS does not know (autograd/cpu.h).
"""
import argparse
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = {  # T, L, H, C, B, vocabulary — as in `qkv bench`
    "tiny": (64, 2, 4, 128, 16, 256),
    "small": (256, 4, 8, 256, 8, 256),
    "mini": (128, 6, 6, 384, 4, 256),
    "long": (1024, 2, 4, 128, 2, 256),
    "deep": (512, 6, 6, 384, 4, 256),
    "gpt2": (64, 12, 12, 768, 4, 50257),  # GPT-2 small's shape at llm.c's CPU run
    "gpt2-1k": (1024, 12, 12, 768, 1, 50257),
    "attention": (256, 1, 8, 256, 8, 256),
}


def torch_model(torch, T, L, H, C, V, sdpa):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(C, C), nn.Linear(C, C)
            self.v_proj, self.out_proj = nn.Linear(C, C), nn.Linear(C, C)

        def forward(self, x):
            B, n, _ = x.shape
            split = lambda t: t.view(B, n, H, C // H).transpose(1, 2)
            q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
            y = attention(torch, q, k, v, sdpa)
            return self.out_proj(y.transpose(1, 2).contiguous().view(B, n, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(C), Attention(), nn.LayerNorm(C)
            self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb, self.pos_emb = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, ids):
            x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))
            for b in self.blocks:
                x = b(x)
            return self.ln_f(x) @ self.tok_emb.weight.t()

    return GPT()


def best_eager_path(torch, device):
    """(sdpa, fused AdamW): what this PyTorch has for training on the device."""
    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    fused = False
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        p.grad = torch.zeros(2, device=device)
        torch.optim.AdamW([p], fused=True).step()  # CPU support arrived in PyTorch 2.4
        fused = True
    except (TypeError, RuntimeError, ValueError):
        pass
    return sdpa, fused


def shape(config, context):
    T, L, H, C, B, V = CONFIGS[config]
    return (context or T), L, H, C, B, V


_blocked = {}  # (n, device) -> the [n, n] mask of keys after each query, made once


def attention(torch, q, k, v, sdpa):
    """Causal attention of [B, H, n, d] heads: SDPA, or written out where PyTorch lacks it (1.13)."""
    if sdpa:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    n = q.shape[-2]
    if (n, q.device) not in _blocked:
        _blocked[(n, q.device)] = ~torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device))
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.softmax(s.masked_fill(_blocked[(n, q.device)], float("-inf")), dim=-1) @ v


def median_seconds(torch, device, warmup, steps, prepare, step):
    """The median time of step(*prepare()) over `steps` calls after `warmup`; prepare() is not timed."""
    times = []
    for i in range(warmup + steps):
        args = prepare()
        sync(torch, device)
        t0 = time.perf_counter()
        step(*args)
        sync(torch, device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_attention_tokens_per_s(torch, config, context, steps, warmup, device, sdpa):
    """Causal attention alone, forward and backward, as `qkv bench --config attention` times it."""
    T, _, H, C, B, _ = shape(config, context)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, H, T, C // H, generator=gen).to(device).requires_grad_() for _ in range(3))

    def step():
        for x in (q, k, v):
            x.grad = None
        attention(torch, q, k, v, sdpa).sum().backward()

    return B * T / median_seconds(torch, device, warmup, steps, lambda: (), step)


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def torch_tokens_per_s(torch, state, config, context, steps, warmup, path, device):
    if config == "attention":
        return torch_attention_tokens_per_s(torch, config, context, steps, warmup, device, path[0])
    T, L, H, C, B, V = shape(config, context)
    if config not in state:
        torch.manual_seed(1)
        model = torch_model(torch, T, L, H, C, V, path[0]).to(device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-4, fused=True) if path[1] else torch.optim.AdamW(groups, lr=1e-4)
        state[config] = (model, opt, torch.Generator().manual_seed(7))
    model, opt, gen = state[config]

    def batch():
        return torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)

    def step(ids, targets):
        # qkv's step copies its batch to the device inside the step: timed here too
        ids, targets = ids.to(device), targets.to(device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(ids).view(-1, V), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return B * T / median_seconds(torch, device, warmup, steps, batch, step)


def qkv_tokens_per_s(binary, config, context, steps, warmup, threads, device):
    """tokens/s and peak resident MiB of one `qkv bench` run (the MiB 0 where it does not print it)."""
    out = subprocess.run([binary, "bench", "--config", config, "--steps", str(steps), "--warmup", str(warmup),
                          "--threads", str(threads), "--context", str(context), "--device", device],
                         check=True, capture_output=True, text=True).stdout
    match = re.search(r"([0-9.]+) tokens/s", out)
    if not match:
        sys.exit(f"compare_torch: no 'tokens/s' in qkv bench's output:\n{out}")
    peak = re.search(r"peak resident memory ([0-9.]+) MiB", out)
    return float(match.group(1)), float(peak.group(1)) if peak else 0.0


def torch_peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qkv", default="build/release/qkv", help="the qkv binary")
    parser.add_argument("--configs", default="tiny,small,mini", help="comma-separated: " + ",".join(CONFIGS))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians are taken over them)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round and system")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each timing")
    parser.add_argument("--threads", default="2", help="thread counts for both systems, comma-separated (1,2,4,8,16)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both train")
    parser.add_argument("--context", type=int, default=0, help="sequence length (0: each config's)")
    parser.add_argument("--baseline", help="an older qkv binary, timed in the same rounds")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch: PyTorch is not installed (apt-get install python3-torch; run with /usr/bin/python3)")
    # A fresh PyTorch model's first CPU steps meet denormal floats: on a 2-core Xeon its tiny step
    # took 150 ms at first, 107 ms at step 40 and 35 ms from step 70 on, and 35 ms from the first
    # with denormals flushed to zero. qkv bench meets none (its first steps run at full speed), so
    # without this the early rounds timed PyTorch's transient, not its speed. Flushing is a PyTorch
    # setting a user can choose; it only ever makes PyTorch faster, never qkv. It sets the calling
    # thread's flags and those of threads started after it: before any torch op starts the pool.
    flushed = args.device == "cpu" and torch.set_flush_denormal(True)
    configs = args.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"compare_torch: unknown config '{c}' ({', '.join(CONFIGS)})")
    try:
        thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        sys.exit(f"compare_torch: --threads takes counts like 1,2,4, got '{args.threads}'")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("compare_torch: --device cuda, but this PyTorch sees no GPU")
        # float32 as float32 on both sides: qkv's cuBLAS calls use CUBLAS_COMPUTE_32F
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    path = best_eager_path(torch, args.device)
    kernels = subprocess.run([args.qkv, "info", "--system"], check=True, capture_output=True, text=True).stdout
    kernels = next((l.split(None, 1)[1] for l in kernels.splitlines() if l.strip().startswith("kernels")), "?")
    print(f"torch {torch.__version__} ({'SDPA' if path[0] else 'attention written out'}, "
          f"{'fused' if path[1] else 'default'} AdamW), qkv: {kernels}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, {args.rounds} rounds x {args.steps} steps"
          f" on {args.device}" + (f" ({torch.cuda.get_device_name()}, TF32 off)" if args.device == "cuda" else "")
          + (", PyTorch flushes denormals" if flushed else ""),
          flush=True)
    # per (config, threads): qkv, PyTorch and baseline tokens/s, qkv's and PyTorch's peak MiB, one entry a round
    results = {(c, n): {"qkv": [], "torch": [], "old": [], "qkv_mib": [], "torch_mib": []}
               for n in thread_counts for c in configs}
    state = {}
    for r in range(args.rounds):
        for n in thread_counts:
            torch.set_num_threads(n)
            for c in configs:
                row = results[(c, n)]
                time_old = lambda: qkv_tokens_per_s(args.baseline, c, args.context, args.steps, args.warmup, n,
                                                    args.device)[0]
                o = time_old() if args.baseline and r % 2 else None  # the baseline first in every other round
                q, q_mib = qkv_tokens_per_s(args.qkv, c, args.context, args.steps, args.warmup, n, args.device)
                t = torch_tokens_per_s(torch, state, c, args.context, args.steps, args.warmup, path, args.device)
                row["qkv"].append(q), row["torch"].append(t), row["qkv_mib"].append(q_mib)
                row["torch_mib"].append(torch_peak_mib())
                line = f"  round {r + 1}, {n} threads, {c}: qkv {q:,.0f} tok/s, torch {t:,.0f} tok/s, ratio {q / t:.2f}"
                if args.baseline:
                    o = o if o is not None else time_old()
                    row["old"].append(o)
                    line += f"; baseline {o:,.0f} tok/s, new/old {q / o:.2f}"
                print(line, flush=True)
    print_table(results, configs, thread_counts, args)


def print_table(results, configs, thread_counts, args):
    old = " baseline tok/s | new/old |" if args.baseline else ""
    print("\n| config | T/L/H/C/B/V | threads | qkv tok/s | PyTorch tok/s | ratio |" + old +
          " qkv peak MiB | PyTorch peak MiB (process) | qkv speed-up from the fewest threads |")
    print("| --- " * (9 + (2 if args.baseline else 0)) + "|")
    median = statistics.median
    for c in configs:
        base = median(results[(c, thread_counts[0])]["qkv"])
        for n in thread_counts:
            row = results[(c, n)]
            q, t = median(row["qkv"]), median(row["torch"])
            ratios = [a / b for a, b in zip(row["qkv"], row["torch"])]
            cells = f"| {c} | {'/'.join(map(str, shape(c, args.context)))} | {n} | {q:,.0f} | {t:,.0f} | {q / t:.2f} " \
                    f"(rounds {min(ratios):.2f}-{max(ratios):.2f}) |"
            if args.baseline:
                gains = [a / b for a, b in zip(row["qkv"], row["old"])]
                cells += f" {median(row['old']):,.0f} | {median(gains):.2f} (rounds {min(gains):.2f}-{max(gains):.2f}) |"
            print(cells + f" {max(row['qkv_mib']):,.0f} | {max(row['torch_mib']):,.0f} | {q / base:.2f} |")


if __name__ == "__main__":
    main()
