#!/usr/bin/env python3
"""Fails when a function in the given folders runs over a line limit.

usage: function_lengths.py FOLDER... LIMIT. Every .cpp, .cu and .h file under
each folder (recursively) is read. A function is a brace block opened at
namespace or class scope by a declaration with ')': free functions, methods
defined inside a class or struct (inline in a header, or in a .cpp's own
structs) and lambdas given a name at namespace scope. Its length runs from
the first line of its declaration (a template line included) to its closing
brace. Comments, string and character literals and preprocessor lines are
blanked before braces are counted, so a brace in them counts for nothing.
"""
import re
import sys
from pathlib import Path

SOURCE_SUFFIXES = ('.cpp', '.cu', '.h')
ACCESS_SPECIFIER = re.compile(r'^\s*(?:public|private|protected)\s*:')
CLASS_HEAD = re.compile(r'^(?:template\s*<.*>\s*)?(?:struct|class|union|enum)\b')
# A constructor's initializer list, reached a member initialised with braces:
# `Foo(int n) : table_{` (the brace belongs to the declaration, not a body;
# so do a default argument's, inside the parentheses).
MEMBER_BRACE_INIT = re.compile(r'\)\s*(?:noexcept\s*)?:(?!:).*[\w>]\s*$')
NAMED_LAMBDA = re.compile(r'=\s*\[[^\]]*\]\s*(?:\(.*\))?[^=]*$')


def blank(text, start, end):
    """text[start:end] as spaces, its newlines kept (line numbers stay)."""
    return re.sub(r'[^\n]', ' ', text[start:end])


def literal_end(text, i, quote):
    """Index just past the string or character literal opening at text[i]."""
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != '\n':
        j += 2 if text[j] == '\\' else 1
    return min(j + 1, len(text))


def word_before(text, i):
    """The identifier characters just before text[i] (a literal's prefix, or a number)."""
    k = i
    while k > 0 and (text[k - 1].isalnum() or text[k - 1] == '_'):
        k -= 1
    return text[k:i]


def is_char_literal(text, i):
    """A ' opens a character literal unless it is a digit separator (1'000)."""
    return word_before(text, i) in ('', 'u8', 'u', 'U', 'L')


def directive_end(text, i):
    """Index of the newline that ends the preprocessor line at text[i] (continuations included)."""
    end = text.find('\n', i)
    while end > 0 and text[end - 1] == '\\':
        end = text.find('\n', end + 1)
    return len(text) if end < 0 else end


def code_only(text):
    """The text with comments, literals and preprocessor lines blanked."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == '#':
            end = directive_end(text, i)
            out.append(blank(text, i, end))
            i = end
            continue
        if c == '/' and text.startswith('//', i):
            end = text.find('\n', i)
            end = n if end < 0 else end
        elif c == '/' and text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
        elif c == 'R' and text.startswith('R"', i) and word_before(text, i) in ('', 'u8', 'u', 'U', 'L'):
            delimiter = text[i + 2:text.index('(', i + 2)]
            end = text.find(')' + delimiter + '"', i) + len(delimiter) + 2
        elif c == '"' or (c == "'" and is_char_literal(text, i)):
            end = literal_end(text, i, c)
        else:
            out.append(c)
            at_line_start = c == '\n' or (at_line_start and c in ' \t')
            i += 1
            continue
        out.append(blank(text, i, end))
        i = end
    return ''.join(out)


def without_template_heads(decl):
    """The declaration without its `template <...>` lines (whose defaults hold '=')."""
    while decl.startswith('template'):
        depth, i = 0, decl.find('<')
        for i in range(i, len(decl)):
            depth += {'<': 1, '>': -1}.get(decl[i], 0)
            if depth == 0:
                break
        decl = decl[i + 1:].lstrip()
    return decl


def kind_of_block(decl):
    """What a brace opened at namespace or class scope starts."""
    if re.match(r'^(?:inline\s+)?namespace\b', decl) or re.match(r'^extern\s*$', decl):
        return 'scope'
    if CLASS_HEAD.match(decl):
        return 'scope'
    if MEMBER_BRACE_INIT.search(decl) or decl.count('(') > decl.count(')'):
        return 'in-declaration'  # a member's or a default argument's braces: `Set s = {}) {`
    if NAMED_LAMBDA.search(decl):
        return 'function'
    without_calls = re.sub(r'operator\s*\S+?\s*\(', '(', without_template_heads(decl))
    while re.search(r'\([^()]*\)', without_calls):
        without_calls = re.sub(r'\([^()]*\)', '', without_calls)
    if re.search(r'(?<![=!<>+\-*/%&|^])=(?!=)', without_calls):
        return 'other'  # an initializer: `table = {`
    return 'function' if ')' in decl else 'other'


def functions(text):
    """(first line, last line, declaration) of every function in a source file."""
    lines = code_only(text).split('\n')
    stack = []  # per open brace: ('scope' | 'function' | 'in-declaration' | 'other', first line, declaration)
    pending, pending_line = [], None  # the declaration read since the last ; { } at a scope
    for number, line in enumerate(lines, 1):
        if stack and stack[-1][0] == 'scope' and ACCESS_SPECIFIER.match(line):
            line = ACCESS_SPECIFIER.sub(lambda m: ' ' * len(m.group()), line)
        for ch in line:
            in_scope = not stack or stack[-1][0] == 'scope'
            if ch == '{':
                if in_scope:
                    decl = ' '.join(''.join(pending).split())
                    stack.append((kind_of_block(decl), pending_line or number, decl))
                    if stack[-1][0] != 'in-declaration':
                        pending, pending_line = [], None
                else:
                    stack.append(('nested', None, None))
            elif ch == '}':
                kind, first, decl = stack.pop() if stack else ('scope', None, None)
                if kind == 'function':
                    yield first, number, decl
                if kind == 'in-declaration':
                    pending.extend('{}')  # so the body's brace ends `a_{} {`, not `a_ {`
                elif not stack or stack[-1][0] == 'scope':
                    pending, pending_line = [], None
            elif in_scope:
                if ch == ';':
                    pending, pending_line = [], None
                elif not ch.isspace() or pending:
                    pending_line = pending_line or number
                    pending.append(ch)
        if pending:
            pending.append(' ')


def source_files(folder):
    return sorted(p for p in Path(folder).rglob('*') if p.suffix in SOURCE_SUFFIXES and p.is_file())


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: function_lengths.py FOLDER... LIMIT')
    folders, limit = sys.argv[1:-1], int(sys.argv[-1])
    longest, longest_at, bad = 0, '', []
    for folder in folders:
        for path in source_files(folder):
            # Named from the folder itself when there are several: autograd/ops/shape.cu.
            name = (Path(Path(folder).name) if len(folders) > 1 else Path()) / path.relative_to(folder)
            for first, last, decl in functions(path.read_text()):
                length = last - first + 1
                if length > longest:
                    longest, longest_at = length, f'{name}:{first}'
                if length > limit:
                    bad.append(f'{name}:{first}: {length} lines: {decl[:80]}')
    for line in bad:
        print('FAIL: ' + line)
    where = ' '.join(Path(folder).name or folder for folder in folders)
    print(f'{"FAIL" if bad else "ok"}: the longest function in {where} has {longest} lines, at {longest_at} '
          f'(limit {limit})')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
