#!/usr/bin/env python3
"""Fails when a function in the given folder runs over a line limit.

usage: function_lengths.py FOLDER LIMIT. A function is a top-level brace
block (inside namespaces) whose opening line ends a declaration with ')';
its length runs from the first line of that declaration to its closing
brace. Strings and comments are skipped when counting braces.
"""
import re
import sys
from pathlib import Path


def blocks(text):
    depth, namespaces, start, decl = 0, [], None, None
    code = re.sub(r'//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', lambda m: re.sub(r'[^\n]', ' ', m.group()), text)
    code = re.sub(r'R"\((?:.|\n)*?\)"', lambda m: re.sub(r'[^\n]', ' ', m.group()), code)
    lines = code.split('\n')
    for number, line in enumerate(lines, 1):
        for ch in line:
            if ch == '{':
                if depth == len(namespaces) and start is None:
                    if re.match(r'\s*namespace\b', line) or line.strip().startswith('namespace'):
                        namespaces.append(depth)
                    else:
                        first = number
                        while first > 1 and lines[first - 2].strip() and not lines[first - 2].rstrip().endswith((';', '}', '{')) \
                                and not lines[first - 2].lstrip().startswith('#'):
                            first -= 1
                        start, decl = first, ' '.join(l.strip() for l in lines[first - 1:number])
                depth += 1
            elif ch == '}':
                depth -= 1
                if namespaces and depth == namespaces[-1] and start is None:
                    namespaces.pop()
                elif start is not None and depth == len(namespaces):
                    if ')' in decl and not decl.startswith(('struct', 'class', 'enum')):
                        yield start, number, decl
                    start = None


def main():
    folder, limit = Path(sys.argv[1]), int(sys.argv[2])
    longest, bad = 0, []
    for path in sorted(folder.glob('*.cpp')):
        for first, last, decl in blocks(path.read_text()):
            length = last - first + 1
            longest = max(longest, length)
            if length > limit:
                bad.append(f'{path.name}:{first}: {length} lines: {decl[:80]}')
    for line in bad:
        print('FAIL: ' + line)
    print(f'{"FAIL" if bad else "ok"}: the longest function in {folder} has {longest} lines (limit {limit})')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
