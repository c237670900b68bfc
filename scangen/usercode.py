"""Checks on C code a user hands in (operator expressions, ScanKernel hooks) before it is
placed into a template: code that would escape its place (a ';' in an expression, an
unbalanced bracket) is refused here, with the piece named, not later by nvcc in scangen's
own lines."""
from __future__ import annotations

import re


#: Words a name in the generated C++ cannot be: the keywords and alternative tokens of C++
#: (through C++20, whichever standard nvcc defaults to), and object-like macros the headers
#: nvcc always includes define with plain names (nvcc -E -dM: glibc's NULL, EOF, INFINITY,
#: NAN; the host compiler's GNU linux and unix). Names starting with '_' (reserved to the
#: implementation, and CUDA's __half) and 'scangen_' (scangen's own) are refused apart.
C_RESERVED_WORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast else
    enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires restrict return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef
    typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    NULL EOF INFINITY NAN linux unix
""".split())


def reserved_name_reason(name: str) -> str | None:
    """Why ``name`` cannot name something in the generated C++ (a struct field, an
    argument), or None if it can."""
    if name in C_RESERVED_WORDS:
        return "is a C++ keyword or a macro of CUDA's headers"
    if name.startswith("_"):
        return "starts with '_' (reserved to the compiler and CUDA, e.g. __half, and to " \
               "scangen's padding)"
    if name.startswith("scangen_"):
        return "starts with 'scangen_', which scangen keeps for its own names"
    return None


class UserCodeError(ValueError):
    """User C code (an operator, a hook, a preamble) that cannot be what it claims."""


#: Comments and string/char literals, matched from left to right as the compiler reads them
#: (so a "/*" inside a string is no comment, and a quote inside a comment no string).
_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'
                                 r"'(?:\\.|[^'\\\n])*'", re.S)


def strip_literals_and_comments(code: str) -> str:
    """The code with comments blanked and string/char literals replaced by 0, for bracket
    counting. What is left of an unclosed comment or string stays, and check_code refuses
    it."""
    return _COMMENT_OR_LITERAL.sub(lambda m: " " if m.group().startswith("/") else "0", code)


def check_code(code: str, what: str, *, expression: bool) -> str:
    """Reject user code that would escape its place in the template: unbalanced brackets,
    and, for an expression, a ';' (it must be one expression, not statements)."""
    if not isinstance(code, str):
        raise TypeError(f"{what} must be a string of C code, not {type(code).__name__}")
    bare = strip_literals_and_comments(code)
    # Unclosed, either would swallow scangen's code after the piece, and nvcc would report
    # the damage far from it.
    if "/*" in bare:
        raise UserCodeError(f"{what} has an unclosed comment ('/*' without '*/'): {code!r}")
    if '"' in bare:
        raise UserCodeError(f"{what} has an unclosed string literal: {code!r}")
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
