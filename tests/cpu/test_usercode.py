"""scangen.usercode.identifiers: the names a piece of user C code refers to, read as C
tokens (what ScanKernel reads to learn whether an output statement uses last_item or
last_counted)."""
import pytest

from scangen.usercode import identifiers


@pytest.mark.parametrize("code,names", [
    ("out[i] = last_item;", {"out", "i", "last_item"}),
    # comments, string and char literals (with their encoding prefixes) hold no names
    ("out[i] = item; // last_item", {"out", "i", "item"}),
    ("out[i] = item; /* last_item\n prev_last_counted */", {"out", "i", "item"}),
    ('printf("last_item %d", k);', {"printf", "k"}),
    ("c = 'l' + L'a' + u8'b';", {"c"}),
    ('s = u8"last_item" + U"x" + L"y";', {"s"}),
    ('s = "a \\" last_item";', {"s"}),
    # a name is a whole token: longer names are others
    ("a = last_items + my_last_item + last_item2 + _last_item;",
     {"a", "last_items", "my_last_item", "last_item2", "_last_item"}),
    # members and qualified names are not the plain names a template declares
    ("a = s.last_item + p->last_counted + ns::prev_last_counted + ::last_item;",
     {"a", "s", "p", "ns"}),
    ("a = s . last_item + p -> x;", {"a", "s", "p"}),
    # numbers: no identifier hides in their digits, suffixes or exponents
    ("a = 1e5f + 0x1Fu + .5e+3 + 7ull + 0x1p-3 + x1;", {"a", "x1"}),
    # keywords are tokens like any name
    ("if (i) return;", {"if", "i", "return"}),
    ("", set()),
])
def test_identifiers_are_the_names_the_code_refers_to(code, names):
    assert identifiers(code) == frozenset(names)
