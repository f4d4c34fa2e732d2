#!/usr/bin/env python3
"""Reruns the qkv examples of the README and docs/commands.md and reports every shown line the program no longer prints.

    python3 docs/check_readme.py [--qkv build/release/qkv] [--work /tmp/qkv-readme] [FILE...]

FILE... are the Markdown pages to check (default: README.md and
docs/commands.md). For maintainers, after a change that moves the numbers (a
new kernel rounds differently, so every training run takes another path):
for each page, in a scratch folder of its own (WORK/<page name>), it trains
the checkpoints the page's "measured" block lists (lines `qkv train ...  #
... after N steps ...; qkv eval: X`), then runs each `$ qkv ...` command of
the page in order and checks that the lines the page shows come out, in
order (a `...` line elides). So each page must train, in its own commands,
every checkpoint it uses.
Timing (tok/s, seconds, ETA, and the size of a page that embeds a log) is
masked; figures such as losses, accuracies and other file sizes are
compared as printed. A measured run's evaluation must appear in eval's own
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


def blocks(page):
    """A page's fenced blocks that are not source code, as lists of lines (a fence's indentation removed)."""
    found, current, indent = [], None, ""
    for line in page.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("```"):
            if current is None:
                indent = line[: len(line) - len(stripped)]
                current = [] if stripped.strip() == "```" else False  # False: a source block (```cpp), skipped
            else:
                if current is not False:
                    found.append(current)
                current = None
        elif current not in (None, False):
            current.append(line[len(indent):] if line.startswith(indent) else line)
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
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        default=[os.path.join(top, "README.md"), os.path.join(top, "docs", "commands.md")],
                        help="Markdown pages to check (default: README.md and docs/commands.md)")
    a = parser.parse_args()
    qkv = os.path.abspath(a.qkv)
    shutil.rmtree(a.work, ignore_errors=True)
    problems = 0
    for path in a.files:
        print(f"== {path}")
        work = os.path.join(a.work, os.path.splitext(os.path.basename(path))[0])
        os.makedirs(work)
        problems += check_page(qkv, open(path, encoding="utf-8").read(), work)
    print(f"\n{problems} example(s) differ" if problems else "\nevery example prints what its page shows")
    return 1 if problems else 0


def check_page(qkv, page, work):
    """Reruns one page's examples in the folder `work`; returns how many differ."""
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

    all_blocks = blocks(page)
    # The default run: the block that shows `qkv train`'s banner without a command.
    for block in all_blocks:
        if block and block[0].startswith("qkv train: gpt on reverse"):
            printed = run(qkv, "qkv train", work)
            report("qkv train (the default run)", missing_lines(block, printed), printed)
            break
    # The measured runs: each run's step count and its evaluation, as the page states them.
    for block in all_blocks:
        for line in block:
            if not line.startswith("qkv train "):
                continue
            command, _, claim = line.partition("#")
            printed = run(qkv, command.strip(), work)
            args = shlex.split(command)
            task = args[args.index("--task") + 1] if "--task" in args else "reverse"
            shown = [f"after {n} steps" for n in re.findall(r"(\d+) steps", claim)]  # the run's last line
            missing = [s for s in shown if not any(s in p for p in printed)]
            evaluation = re.search(r"qkv eval: (?:HR@10 )?([0-9.]+%?)", claim)
            if evaluation:  # in eval's own lines: training's held-out lines print figures of the same form
                evaluated = run(qkv, f"qkv eval {task}.safetensors", work)
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
            printed = run(qkv, command, work)
            report(command.split("  #")[0], missing_lines(block[i + 1 : end], printed), printed)
    return problems


if __name__ == "__main__":
    sys.exit(main())
