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
#: (so a "/*" inside a string is no comment, and a quote inside a comment no string); a
#: literal with its encoding prefix (u8"", L''), which is part of the one token.
_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|(?:\b(?:u8|u|U|L))?(?:'
                                 r'"(?:\\.|[^"\\\n])*"|'
                                 r"'(?:\\.|[^'\\\n])*')", re.S)


def strip_literals_and_comments(code: str) -> str:
    """The code with comments blanked and string/char literals replaced by 0, for bracket
    counting. What is left of an unclosed comment or string stays, and check_code refuses
    it."""
    return _COMMENT_OR_LITERAL.sub(lambda m: " " if m.group().startswith("/") else "0", code)


#: C tokens as the compiler splits them, once comments and literals are gone: a number (a
#: preprocessing number: "1e5f" and "0x1Fu" are one token each, so no identifier hides in
#: them), an identifier, or a punctuator (the three that may put a member name after them,
#: then any other character).
_TOKEN = re.compile(r"(?P<number>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*)"
                    r"|(?P<name>[A-Za-z_][0-9A-Za-z_]*)|(?P<punctuator>->|::|\S)")
#: After these, a name is a member (``s.last_item``, ``p->last_item``) or a qualified name
#: (``ns::last_item``, ``::last_item``): never one of the plain names a template declares.
_QUALIFYING = frozenset({".", "->", "::"})


def identifiers(code: str) -> frozenset[str]:
    """The names ``code`` refers to on its own: its C identifier tokens (keywords included),
    less those inside comments and string or char literals, those after ``.``, ``->`` or
    ``::`` (members and qualified names), and the digits and suffixes of numbers. scangen
    reads this, not the text, to learn which of the names it may declare (``last_item``,
    ``last_counted``) a piece of user code uses: ``last_items`` or ``my_last_item`` is
    another name, and a mention in a comment no use. Macros are not expanded: a name
    reached only through a macro defined elsewhere is not in the set."""
    names, previous = set(), None
    for token in _TOKEN.finditer(strip_literals_and_comments(code)):
        name = token.group("name")
        if name is not None and previous not in _QUALIFYING:
            names.add(name)
        previous = token.group()
    return frozenset(names)


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
