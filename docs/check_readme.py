#!/usr/bin/env python3
"""Reruns the README's qkv examples and reports every shown line the program no longer prints.

    python3 docs/check_readme.py [--qkv build/release/qkv] [--work /tmp/qkv-readme]

For maintainers, after a change that moves the numbers (a new kernel rounds
differently, so every training run takes another path): it trains the
README's checkpoints as its "Measured here" block does, then runs each
`$ qkv ...` command of the README in order in one scratch folder and checks
that the lines the README shows come out, in order (a `...` line elides).
Timing (tok/s, seconds, ETA, and the size of a page that embeds a log) is
masked; figures such as losses, accuracies and other file sizes are
compared as printed. A "Measured here" evaluation must appear in eval's own
output. Not a ctest: training paths differ
between machines (OpenBLAS picks its kernels by CPU), and it takes minutes.
Skipped: bench and info --system (this machine's speed), mpirun, cat, and
--device cuda. Exit status 1 if any line is missing. Python's standard
library only.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

TIMING = [
    (re.compile(r"\d+ tok/s"), "N tok/s"),
    (re.compile(r"\d+(m\d+)?s elapsed"), "T elapsed"),
    (re.compile(r"ETA (≤ )?\S+"), "ETA"),
    (re.compile(r" in \d+(m\d+)?s"), " in T"),
    # A page embeds its run's log, tokens/s column included: its size moves by a KB with the timing.
    (re.compile(r"\.html \(\d+ KB\)"), ".html (N KB)"),
]


def masked(line):
    for pattern, replacement in TIMING:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def blocks(readme):
    """The README's fenced blocks that are not source code, as lists of lines."""
    found, current = [], None
    for line in readme.splitlines():
        if line.startswith("```"):
            if current is None:
                current = [] if line.strip() == "```" else None
                if current is None:  # a source block (```cpp): skip to its end
                    current = False
            else:
                if current is not False:
                    found.append(current)
                current = None
        elif current not in (None, False):
            current.append(line)
    return found


def run(qkv, command, work):
    args = shlex.split(command.split("  #")[0])
    assert args[0] == "qkv"
    done = subprocess.run([qkv] + args[1:], cwd=work, capture_output=True, text=True, timeout=600)
    return (done.stdout + done.stderr).splitlines()


def missing_lines(shown, printed):
    """The shown lines (`...` elides) that do not appear in order in the printed ones."""
    printed = [masked(p) for p in printed]
    at, missing = 0, []
    for line in shown:
        if line.strip().startswith("..."):
            continue
        want = masked(line)
        try:
            at = printed.index(want, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qkv", default="build/release/qkv")
    parser.add_argument("--work", default="/tmp/qkv-readme")
    parser.add_argument("--readme", default=os.path.join(os.path.dirname(__file__), "..", "README.md"))
    a = parser.parse_args()
    qkv = os.path.abspath(a.qkv)
    readme = open(a.readme, encoding="utf-8").read()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    problems = 0

    def report(what, missing, printed):
        nonlocal problems
        if not missing:
            print(f"ok      {what}")
            return
        problems += 1
        print(f"DIFFERS {what}\n  shown but not printed:")
        for line in missing:
            print(f"    {line}")
        print("  printed:")
        for line in printed:
            print(f"    {line}")

    all_blocks = blocks(readme)
    # The default run: the block that shows `qkv train`'s banner without a command.
    for block in all_blocks:
        if block and block[0].startswith("qkv train: gpt on reverse"):
            printed = run(qkv, "qkv train", a.work)
            report("qkv train (the default run)", missing_lines(block, printed), printed)
            break
    # "Measured here": each run's step count and its evaluation, as the README states them.
    for block in all_blocks:
        for line in block:
            if not line.startswith("qkv train "):
                continue
            command, _, claim = line.partition("#")
            printed = run(qkv, command.strip(), a.work)
            args = shlex.split(command)
            task = args[args.index("--task") + 1] if "--task" in args else "reverse"
            shown = [f"after {n} steps" for n in re.findall(r"(\d+) steps", claim)]  # the run's last line
            missing = [s for s in shown if not any(s in p for p in printed)]
            evaluation = re.search(r"qkv eval: (?:HR@10 )?([0-9.]+%?)", claim)
            if evaluation:  # in eval's own lines: training's held-out lines print figures of the same form
                evaluated = run(qkv, f"qkv eval --checkpoint {task}.safetensors", a.work)
                printed += evaluated
                if not any(evaluation.group(1) in p for p in evaluated):
                    missing.append(evaluation.group(1))
            report(command.strip(), missing, printed)
    # Every `$ qkv ...` example, in order.
    skip = re.compile(r"^\$ (?!qkv )|qkv bench|info --system|--device cuda|\.\.\.")
    for block in all_blocks:
        commands = [i for i, line in enumerate(block) if line.startswith("$ ")]
        for n, i in enumerate(commands):
            end = commands[n + 1] if n + 1 < len(commands) else len(block)
            command = block[i][2:]
            if skip.search(block[i]):
                continue
            printed = run(qkv, command, a.work)
            report(command.split("  #")[0], missing_lines(block[i + 1 : end], printed), printed)
    print(f"\n{problems} example(s) differ" if problems else "\nevery example prints what the README shows")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
