"""Checks on C code a user hands in (operator expressions, ScanKernel hooks) before it is
placed into a template: code that would escape its place (a ';' in an expression, an
unbalanced bracket) is refused here, with the piece named, not later by nvcc in scangen's
own lines."""
from __future__ import annotations

import re


class UserCodeError(ValueError):
    """User C code (an operator, a hook, a preamble) that cannot be what it claims."""


def strip_literals_and_comments(code: str) -> str:
    """The code with string/char literals and comments blanked, for bracket counting."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', "0", code)


def check_code(code: str, what: str, *, expression: bool) -> str:
    """Reject user code that would escape its place in the template: unbalanced brackets,
    and, for an expression, a ';' (it must be one expression, not statements)."""
    if not isinstance(code, str):
        raise TypeError(f"{what} must be a string of C code, not {type(code).__name__}")
    bare = strip_literals_and_comments(code)
    if expression and not bare.strip():
        raise UserCodeError(f"{what} is empty; write a C expression")
    if expression and ";" in bare:
        raise UserCodeError(f"{what} must be a single C expression (no ';'): {code!r}")
    depth = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in bare:
        if ch in "([{":
            depth.append(ch)
        elif ch in pairs:
            if not depth or depth.pop() != pairs[ch]:
                raise UserCodeError(f"{what} has an unmatched {ch!r}: {code!r}")
    if depth:
        raise UserCodeError(f"{what} has an unclosed {depth[-1]!r}: {code!r}")
    return code
