"""Rendering, without a GPU: every variant make_spec accepts renders (the Environment is
StrictUndefined, so a missing variable raises) into text that holds what the spec asked for.

Whether the text is valid CUDA is test_compile_nvcc.py's job; here the checks are cheap and
structural: the module defines exactly the kernels kernel_names() promises, once each; the
combine expression, identity literal, element type and preamble are in it; no template
syntax or Python value leaked; brackets balance outside comments.
"""
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scangen import (ALGORITHMS, BUILTIN_OPERATORS, ELEMENT_TYPES, LAST_NONZERO, MODES,
                     STRATEGIES, Operator, Scan, make_spec)
from scangen.render import kernel_names, render

REPO = Path(__file__).resolve().parents[2]
DTYPES = [t.name for t in ELEMENT_TYPES.values()]

#: A saturating add on uint8 through a device function in the preamble.
SATURATING_ADD = Operator(
    "sat_add(a, b)", 0, name="sat_add",
    preamble="""
// saturating add: associative on non-negative values
static __device__ __forceinline__ unsigned char sat_add(unsigned char a, unsigned char b)
{
    const unsigned int s = (unsigned int)a + (unsigned int)b;
    return s > 255u ? (unsigned char)255 : (unsigned char)s;
}
""")

#: A preamble with a nested aggregate initializer: "{{" is valid C and must come out verbatim
#: (the preamble is data for the template, never template source).
TABLE_LOOKUP = Operator(
    "pick(a, b)", 0, name="table_pick",
    preamble="static __device__ const int kTable[2][2] = {{0, 1}, {1, 0}};\n"
             "static __device__ __forceinline__ int pick(int a, int b) "
             "{ return b != 0 ? b : a + kTable[0][0]; }")


# --- structural checks ------------------------------------------------------------------

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
_LEAK = re.compile(r"\b(?:None|True|False|Undefined|jinja2?)\b")
_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def code_only(text):
    """The text without comments and string/char literals (asm strings hold % and {})."""
    return _STRING.sub('""', _COMMENT.sub(" ", text))


def check_module(spec, source=None):
    """Every structural promise of a rendered module; returns its text."""
    module = render(spec) if source is None else source
    text = module.text
    assert isinstance(text, str) and text.strip()
    assert tuple(module.kernel_names) == tuple(kernel_names(spec))

    preamble = spec.operator.preamble.strip()
    body = text.replace(preamble, "") if preamble else text
    for token in ("{{", "}}", "{%", "%}", "{#", "#}"):
        assert token not in body, f"template syntax {token!r} left in the output"

    code = code_only(body)
    leak = _LEAK.search(code)
    assert leak is None, f"Python value {leak and leak.group()!r} leaked into the CUDA code"
    for opening, closing in ("{}", "()", "[]"):
        assert code.count(opening) == code.count(closing), f"unbalanced {opening}{closing}"

    defined = _KERNEL.findall(code)
    assert sorted(defined) == sorted(kernel_names(spec)), \
        f"kernels defined {defined}, promised {kernel_names(spec)}"

    etype = spec.etype
    expression = spec.operator.c_expression(etype)
    assert expression in text
    assert spec.identity_literal in text
    assert re.search(rf"\b{re.escape(etype.c_name)}\b", text)
    assert re.search(rf"\b{spec.section_size}\b", text)
    if preamble:
        assert preamble in text
        # C needs the helper declared before the combine expression calls it.
        assert text.index(preamble) < text.index(expression)
    numbered = module.numbered().splitlines()
    assert len(numbered) == len(text.splitlines())
    assert re.match(r"\s*1 \| ", numbered[0])
    return text


def _valid(op, dtype):
    return not (op.integer_only and np.dtype(dtype).kind == "f")


MATRIX = [(a, m, d, o) for a, m, d, o in itertools.product(ALGORITHMS, MODES, DTYPES,
                                                           BUILTIN_OPERATORS)
          if _valid(BUILTIN_OPERATORS[o], d)]


def test_matrix_is_the_whole_product_less_bitwise_on_floats():
    assert len(ALGORITHMS) == 6 and len(MODES) == 2 and len(DTYPES) == 10
    assert len(BUILTIN_OPERATORS) == 7
    assert len(MATRIX) == 6 * 2 * 10 * 7 - 6 * 2 * 2 * 3
    for algorithm, mode, dtype, op in itertools.product(ALGORITHMS, MODES, ("float32", "float64"),
                                                        ("bit_and", "bit_or", "bit_xor")):
        with pytest.raises(TypeError, match="bitwise"):
            make_spec(dtype, op, mode=mode, algorithm=algorithm)


@pytest.mark.parametrize("algorithm,mode,dtype,op", MATRIX)
def test_every_variant_renders(algorithm, mode, dtype, op):
    for strategy in STRATEGIES:
        spec = make_spec(dtype, op, mode=mode, algorithm=algorithm, strategy=strategy)
        check_module(spec)


# --- section sizes --------------------------------------------------------------------------

def accepted_shapes(algorithm, dtype):
    """Every (section_size, items_per_thread) make_spec accepts for this algorithm and type."""
    items_choices = [1, 2, 4, 8, 16, 32] if ALGORITHMS[algorithm].coarsening_is_parameter \
        else [None]
    shapes = []
    for items, exponent in itertools.product(items_choices, range(0, 17)):
        try:
            spec = make_spec(dtype, "add", algorithm=algorithm, section_size=2**exponent,
                             items_per_thread=items)
        except ValueError:
            continue
        shapes.append((spec.section_size, spec.items_per_thread))
    return sorted(set(shapes))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float32", "float64"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_every_accepted_section_size_renders(algorithm, dtype):
    shapes = accepted_shapes(algorithm, dtype)
    sections = {s for s, _ in shapes}
    # the sweep reaches the smallest sections and a full 1024-thread block
    assert min(sections) <= 4
    assert max(s // i for s, i in shapes) == 1024
    # every shape in both modes; the strategies take turns (each changes only the kernels
    # around the block scan, which test_every_variant_renders covers)
    turns = itertools.cycle(STRATEGIES)
    for (section, items), mode in itertools.product(shapes, MODES):
        strategy = next(turns)
        spec = make_spec(dtype, LAST_NONZERO, mode=mode, algorithm=algorithm,
                         section_size=section, items_per_thread=items, strategy=strategy)
        assert spec.section_size == section and spec.items_per_thread == items
        check_module(spec)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_largest_sections(algorithm):
    largest = 1024 * ALGORITHMS[algorithm].default_items_per_thread
    spec = make_spec("float32", "max", algorithm=algorithm, section_size=largest,
                     strategy="hierarchical")
    assert spec.block_size == 1024
    check_module(spec)
    if ALGORITHMS[algorithm].coarsening_is_parameter:
        for items in (4, 8):
            spec = make_spec("int8", "min", algorithm=algorithm, section_size=1024 * items,
                             items_per_thread=items)
            assert spec.block_size == 1024
            check_module(spec)


# --- user operators ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_user_operators_render(algorithm, mode):
    for strategy in STRATEGIES:
        for dtype, op in [("uint8", SATURATING_ADD), ("int32", TABLE_LOOKUP),
                          ("float64", LAST_NONZERO), ("int16", LAST_NONZERO)]:
            text = check_module(make_spec(dtype, op, mode=mode, algorithm=algorithm,
                                          strategy=strategy))
            if op.preamble:
                assert text.count(op.preamble.strip()) == 1


def test_preamble_with_braces_comes_out_verbatim():
    text = render(make_spec("int32", TABLE_LOOKUP)).text
    assert "{{0, 1}, {1, 0}}" in text


def test_expression_and_identity_per_type_from_callables():
    op = Operator(lambda t: f"(a < b ? b : a) /* {t.c_name} */",
                  lambda t: t.lowest(), name="typed_max")
    for dtype in DTYPES:
        spec = make_spec(dtype, op)
        text = check_module(spec)
        assert f"/* {spec.etype.c_name} */" in text


def test_different_specs_render_differently():
    base = dict(mode="inclusive", algorithm="kogge_stone", section_size=256,
                strategy="hierarchical")
    texts = {
        render(make_spec("int32", "add", **base)).text,
        render(make_spec("uint32", "add", **base)).text,
        render(make_spec("int32", "max", **base)).text,
        render(make_spec("int32", "add", **{**base, "mode": "exclusive"})).text,
        render(make_spec("int32", "add", **{**base, "section_size": 512})).text,
        render(make_spec("int32", "add", **{**base, "algorithm": "brent_kung"})).text,
        render(make_spec("int32", Operator("a + b", 0, name="plus"), **base)).text,
    }
    assert len(texts) == 7


def test_identity_literals_of_extremes_are_emitted():
    cases = [("float32", "max", "-inf"), ("float32", "min", "inf"), ("float64", "max", "-inf"),
             ("int64", "max", -2**63), ("uint64", "min", 2**64 - 1), ("int8", "max", -128),
             ("uint16", "bit_and", 65535)]
    for dtype, op, value in cases:
        spec = make_spec(dtype, op)
        assert spec.identity_literal == spec.etype.literal(float(value) if isinstance(value, str)
                                                           else value)
        check_module(spec)


def test_source_of_a_scan_is_its_rendered_module():
    scan = Scan("int16", LAST_NONZERO, mode="exclusive", algorithm="coarsened",
                section_size=512, items_per_thread=8)
    assert scan.source == render(scan.spec).text
    check_module(scan.spec)


# --- no CUDA import on the rendering path ---------------------------------------------------

_NO_PYCUDA = r"""
import sys

class BlockPycuda:
    # Whether or not pycuda is installed here, importing it fails.
    def find_spec(self, name, path=None, target=None):
        if name == "pycuda" or name.startswith("pycuda."):
            raise ImportError("pycuda is blocked in this test")
        return None

BLOCK = {block}
if BLOCK:
    sys.meta_path.insert(0, BlockPycuda())

import numpy as np
import scangen

scan = scangen.Scan("float32", "max", mode="exclusive", algorithm="brent_kung",
                    section_size=256)
text = scan.source
assert "scan_sections_exclusive" in text, text[:200]
plan = scan.plan(10**6 + 3)
assert plan.launches and plan.describe()
user = scangen.Scan("uint8", scangen.Operator("b != 0 ? b : a", 0, name="last"))
assert "b != 0 ? b : a" in user.source
assert "pycuda" not in sys.modules, sorted(m for m in sys.modules if "pycuda" in m)
if BLOCK:
    try:
        scan(np.arange(4, dtype=np.float32))
    except scangen.GPUUnavailableError as err:
        message = str(err)
        assert "PyCUDA" in message and "pip install" in message, message
        assert "Scan.source" in message, message
    else:
        raise AssertionError("calling a scan without pycuda did not raise")
print("ok")
"""


@pytest.mark.parametrize("block", [False, True], ids=["as_installed", "pycuda_blocked"])
def test_rendering_never_imports_pycuda(block):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, "-c", _NO_PYCUDA.format(block=block)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
