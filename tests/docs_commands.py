#!/usr/bin/env python3
"""Checks that every qkv command the docs show still parses.

    python3 tests/docs_commands.py QKV FILE...

QKV is the program (build/release/qkv); each FILE a Markdown page. Inside
fenced code blocks, a line (at the fence's own indentation, so indented
output lines are not taken) is a command when it starts with `qkv <command>`,
`$ qkv`, `./build/release/qkv`, `build/release/qkv` (any path ending in
`/qkv`), or `mpirun ... qkv` (its qkv part); `$ ` and leading `VAR=value`
words are dropped, and a trailing `\\` joins the next line. `./qkv.sh` lines
and every other line (output, `cat`, `cmake`) are skipped, as is a line whose
word after qkv is not a command or flag name (`qkv train: gpt on reverse...`
is output). The words are split as a shell does (shlex); a `#` comment is
dropped, the words stop at `|`, `>`, `<`, `&&`, `||`, `;` or `&`, and a bare
`...` (an elision) is dropped.

Each command runs as `QKV <command> <args>` with QKV_PARSE_ONLY=1 in the
environment (the command parses its flags and exits 0 without doing the
work; 2 for a flag that does not exist or a value that does not parse), in a
scratch folder, with a 10 s timeout. Every command must exit 0, and every
file must hold at least one command (so a broken extractor cannot pass).
Prints one line per failure and a summary; exit status 1 on any failure.
Python's standard library only.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
COMMAND_WORD = re.compile(r"^(-{1,2}[a-z][a-z-]*|[a-z][a-z0-9-]*)$")  # train, help, --version; not "train:"
STOP = ("|", ">", "<", "&&", "||", ";", "&", "2>", "&>")


def is_qkv(word):
    return word == "qkv" or word.endswith("/qkv")


def fenced_lines(text):
    """(line number, line with the fence's indentation removed) for every line inside a fenced block."""
    fence, indent = None, ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                indent, fence = match.group(1), match.group(2)
        elif match and match.group(2).startswith(fence[0] * len(fence)) and line.strip() == match.group(2):
            fence = None
        else:
            yield number, line[len(indent):] if line.startswith(indent) else line


def joined(lines):
    """The fenced lines with `\\` continuations joined: (first line's number, whole line)."""
    pending, start = None, 0
    for number, line in lines:
        if pending is not None:
            line = pending + " " + line.strip()
            number = start
        if line.rstrip().endswith("\\"):
            pending, start = line.rstrip()[:-1], number
            continue
        pending = None
        yield number, line


def words_of(line):
    """The qkv part of a command line, as [command, args...], or None where the line is no qkv command."""
    if not line or line[0].isspace():  # indented past its fence: output
        return None
    text = line[2:] if line.startswith("$ ") else line
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote: output (or prose) that no shell would take
        return None
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    if words[0] == "mpirun":
        at = next((i for i, w in enumerate(words) if is_qkv(w)), None)
        if at is None:
            return None
        words = words[at:]
    if not is_qkv(words[0]) or len(words) < 2 or not COMMAND_WORD.match(words[1]):
        return None
    args = []
    for word in words[1:]:
        if word in STOP or word.startswith(STOP):
            break
        if word.endswith(";"):
            args.append(word[:-1])
            break
        if word != "...":
            args.append(word)
    return args


def commands(path):
    """(line number, [command, args...]) of every qkv command in a Markdown file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for number, line in joined(fenced_lines(text)):
        args = words_of(line)
        if args:
            yield number, args


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    qkv = os.path.abspath(argv[1])
    files = argv[2:]
    env = dict(os.environ, QKV_PARSE_ONLY="1")
    failures = total = 0
    with tempfile.TemporaryDirectory(prefix="qkv-docs-commands-") as scratch:
        for path in files:
            found = list(commands(path))
            if not found:
                failures += 1
                print(f"{path}: no qkv command found in its fenced blocks")
                continue
            for number, args in found:
                total += 1
                shown = "qkv " + " ".join(shlex.quote(a) for a in args)
                try:
                    done = subprocess.run([qkv] + args, cwd=scratch, env=env, capture_output=True, text=True,
                                          timeout=10, stdin=subprocess.DEVNULL)
                except subprocess.TimeoutExpired:
                    failures += 1
                    print(f"{path}:{number}: {shown}: still running after 10 s")
                    continue
                if done.returncode != 0:
                    failures += 1
                    error = " ".join(done.stderr.split()) or "(nothing on stderr)"
                    print(f"{path}:{number}: {shown}: exit {done.returncode}: {error}")
    if failures:
        print(f"{failures} failure(s) among {total} commands in {len(files)} files")
        return 1
    print(f"{total} commands in {len(files)} files parse")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
