"""Rendering, without a GPU: every variant make_spec accepts renders (the Environment is
StrictUndefined, so a missing variable raises) into text that holds what the spec asked for.

Whether the text is valid CUDA is test_compile_nvcc.py's job; here the checks are cheap and
structural: the module defines exactly the kernels ``scan_module.kernels`` names, once each,
as ``extern "C" __global__`` entry points with the parameters the launcher prepares; the
combine expression, identity literal, C type and preambles are in it; no template syntax or
Python value leaked; brackets balance outside comments and strings; the user's code sits
between its markers, where ``user_spans`` and ``user_piece_at`` find it.
"""
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scangen import (ALGORITHMS, BUILTIN_OPERATORS, LAST_NONZERO, MODES, STRATEGIES, Operator,
                     Scan, ScanKernel, SegmentedScan, Tuning, make_spec)
from scangen.args import c_parameters
from scangen.kernel import PlainArrays
from scangen.families import FAMILIES, IOS
from scangen.render import ModuleSource, render
from tests.support import (AFFINE, AFFINE_MAPS, COMPACTION, DTYPES, OPERATORS, PARTITION,
                           SATURATING_ADD, TABLE_LOOKUP, TOTAL_STRATEGIES,
                           type_operator_pairs)

REPO = Path(__file__).resolve().parents[2]

#: A hooks preamble with a nested aggregate initializer: "{{" is valid C and is data.
TABLE_PREAMBLE = dict(arguments="const int *x, int *out",
                      input_expr="kFlip[x[i] & 1][0]", output_statement="out[i] = item;",
                      preamble="static __device__ const int kFlip[2][2] = {{0, 1}, {1, 0}};")


# --- structural checks ------------------------------------------------------------------

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
_LEAK = re.compile(r"\b(?:None|True|False|Undefined|jinja2?)\b")
_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+__launch_bounds__\s*\(([^)]*)\)\s*'
                    r'(\w+)\s*\(([^)]*)\)')


def code_only(text):
    """The text without comments and string/char literals (asm strings hold % and {})."""
    return _STRING.sub('""', _COMMENT.sub(" ", text))


def scan_module_of(thing):
    """The ScanModule of a Scan, a ScanKernel or a ScanModule."""
    thing = getattr(thing, "kernel", thing)
    return getattr(thing, "scan_module", thing)


def user_pieces(scan_module):
    """{piece: the user's text} for every piece of user code the module must carry."""
    spec, hooks = scan_module.scan, scan_module.hooks
    pieces = {"operator": spec.operator.c_expression(spec.etype),
              "input_expr": hooks.input_expr, "output_statement": hooks.output_statement}
    if spec.operator.preamble.strip():
        pieces["operator preamble"] = spec.operator.preamble.strip()
    if hooks.preamble:
        pieces["preamble"] = hooks.preamble
    if hooks.is_segment_start_expr is not None:
        pieces["is_segment_start_expr"] = hooks.is_segment_start_expr
    return pieces


def check_module(thing):
    """Every structural promise of a rendered module; returns its text."""
    scan_module = scan_module_of(thing)
    spec, hooks = scan_module.scan, scan_module.hooks
    module = render(scan_module)
    assert isinstance(module, ModuleSource)
    text = module.text
    assert isinstance(text, str) and text.strip()
    lines = text.splitlines()
    kernels = scan_module.kernels
    names = [k.name for k in kernels]
    assert len(set(names)) == len(names), f"a kernel twice in {names}"
    assert list(module.kernel_names) == names

    # the user's code sits between its markers, verbatim, and nowhere else is template text
    pieces = user_pieces(scan_module)
    spans = module.user_spans
    assert set(spans) == set(pieces), f"spans {sorted(spans)}, pieces {sorted(pieces)}"
    inside = set()
    for piece, (first, last) in spans.items():
        assert "\n".join(lines[first - 1:last]) == pieces[piece], piece
        assert module.user_piece_at(first) == piece and module.user_piece_at(last) == piece
        assert lines[first - 2] == f"// user {piece} {{" and lines[last] == f"// }} user {piece}"
        inside.update(range(first, last + 1))
    assert module.user_piece_at(1) is None and module.user_piece_at(len(lines)) is None
    ours = "\n".join(line for number, line in enumerate(lines, 1) if number not in inside)
    for token in ("{{", "}}", "{%", "%}", "{#", "#}"):
        assert token not in ours, f"template syntax {token!r} left in the output"

    code = code_only(ours)
    leak = _LEAK.search(code)
    assert leak is None, f"Python value {leak and leak.group()!r} leaked into the CUDA code"
    whole = code_only(text)
    for opening, closing in ("{}", "()", "[]"):
        assert whole.count(opening) == whole.count(closing), f"unbalanced {opening}{closing}"

    # exactly the promised entry points, extern "C", with the parameters the launcher
    # prepares (scangen.compile prepares kernel.parameters(hooks.arguments))
    defined = _ENTRY.findall(_COMMENT.sub(" ", text))
    assert [name for _, name, _ in defined] == names, f"defined {defined}, promised {names}"
    assert len(re.findall(r"\b__global__\b", code)) == len(names), "a __global__ not extern C"
    for kernel, (bounds, _, parameters) in zip(kernels, defined):
        assert parameters == c_parameters(kernel.parameters(hooks.arguments)), kernel.name
        assert bounds.split(",")[0].strip() == "BLOCK_SIZE"
        assert ("," in bounds) == kernel.family.single_pass

    # what the spec asked for
    etype = spec.etype
    assert f"typedef {etype.c_name} scan_t;" in text
    assert f"static const int SECTION_SIZE = {spec.section_size};" in text
    assert f"static const int BLOCK_SIZE = {spec.block_size};" in text
    assert f"static const int ITEMS_PER_THREAD = {spec.items_per_thread};" in text
    assert re.search(r"scan_identity\(\)\s*\{\s*return " + re.escape(spec.identity_literal)
                     + r";", text)
    assert ("struct acc_t" in text) == spec.segmented
    assert ("scan_tiles" in text) == any(k.family.single_pass for k in kernels)
    assert ("struct TotalsIO" in text) == any(k.io == "totals" for k in kernels)
    operator_line = spans["operator"][0]
    if "operator preamble" in spans:  # C needs the helper declared before combine calls it
        assert spans["operator preamble"][1] < operator_line
    if "preamble" in spans:  # before the hooks, which may call it
        assert spans["preamble"][1] < lines.index("struct UserIO") + 1 < spans["input_expr"][0]

    numbered = module.numbered().splitlines()
    assert len(numbered) == len(lines)
    assert re.match(r"\s*1 \| ", numbered[0])
    around = module.numbered(around=operator_line).splitlines()
    marked = [line for line in around if line.startswith(">")]
    assert marked == [f">{operator_line:>{len(str(len(lines)))}} | {lines[operator_line - 1]}"]
    return text


MATRIX = [(a, s) for a, s in itertools.product(ALGORITHMS, STRATEGIES)]


def test_matrix_is_the_whole_product_less_bitwise_on_floats():
    assert len(ALGORITHMS) == 6 and len(MODES) == 2 and len(DTYPES) == 13
    assert len(BUILTIN_OPERATORS) == 7 and len(OPERATORS) == 8
    # bitwise needs integers (5 types without); min, max and last_nonzero (a comparison with
    # 0 in C) need real values (not the 2 complex types)
    assert len(type_operator_pairs()) == 13 * 8 - 5 * 3 - 2 * 3
    for algorithm, strategy, dtype, op in itertools.product(
            ALGORITHMS, STRATEGIES, ("float32", "float64"), ("bit_and", "bit_or", "bit_xor")):
        with pytest.raises(TypeError, match="bitwise"):
            make_spec(dtype, op, algorithm=algorithm, strategy=strategy)


@pytest.mark.parametrize("algorithm,strategy", MATRIX)
def test_every_variant_renders(algorithm, strategy):
    for (dtype, op), mode in itertools.product(type_operator_pairs(), MODES):
        check_module(Scan(dtype, OPERATORS[op], mode=mode, algorithm=algorithm,
                          strategy=strategy))


def test_every_kernel_is_rendered_by_some_strategy():
    """(complex128 for the classic single pass: 1- to 8-byte values take the persistent
    one past one section, so their modules have no other; the columns kernel is a Scan's
    along an axis, and its rows kernel along the last; the segments kernel a
    SegmentedScan's by offsets.)"""
    names = {k.name for s in STRATEGIES for dtype in ("int32", "complex128")
             for scan in [Scan(dtype, strategy=s)]
             for k in scan.kernel.scan_module.kernels + scan.columns_kernel.scan_module.kernels}
    names |= {k.name for k in SegmentedScan("int32").segment_tiles_kernel.scan_module.kernels}
    assert names == {f"{f.name}_{io}" for f in FAMILIES for io in IOS} - {
        "scan_tiles_totals", "scan_tiles_persistent_totals", "scan_columns_totals",
        "scan_rows_totals", "scan_segments_totals"}


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
    assert min(sections) == 2
    assert max(s // i for s, i in shapes) == 1024
    # every shape in both modes; the strategies take turns (each changes only the kernels
    # around the block scan, which test_every_variant_renders covers)
    turns = itertools.cycle(STRATEGIES)
    for (section, items), mode in itertools.product(shapes, MODES):
        strategy = next(turns)
        scan = Scan(dtype, LAST_NONZERO, mode=mode, algorithm=algorithm,
                    section_size=section, items_per_thread=items, strategy=strategy)
        assert scan.spec.section_size == section and scan.spec.items_per_thread == items
        check_module(scan)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_largest_sections(algorithm):
    items = ALGORITHMS[algorithm].default_items_per_thread
    scan = Scan("float32", "max", algorithm=algorithm, section_size=1024 * items,
                items_per_thread=items, strategy="hierarchical")
    assert scan.spec.block_size == 1024
    check_module(scan)
    if ALGORITHMS[algorithm].coarsening_is_parameter:
        for items in (4, 8, 32):
            scan = Scan("int8", "min", algorithm=algorithm, section_size=1024 * items,
                        items_per_thread=items)
            assert scan.spec.block_size == 1024
            check_module(scan)


# --- shared-memory slots --------------------------------------------------------------------

def _slot(i, pad):
    """templates/module.cu.j2's slot(i) (i >= 0), elementwise."""
    return i + i // pad if pad else i


def _slot_sum(a, b, pad):
    """templates/module.cu.j2's slot_sum(a, b): slot(a) + slot(b) for a period that is a
    power of two, else slot(a + b)."""
    if pad and pad & (pad - 1) == 0:
        return _slot(a, pad) + _slot(b, pad)
    return _slot(a + b, pad)


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if ALGORITHMS[a].padded])
def test_slot_sum_is_the_slot_of_the_sum_where_the_templates_use_it(algorithm, dtype):
    """slot_sum(a, b) == slot(a + b) for every (a, b) the templates give it, on every
    accepted shape: emit_one's element and its predecessor (threadIdx.x or threadIdx.x - 1,
    k * BLOCK_SIZE), and for whole warps items_to_run's transpose (first + lane, k * 32) and
    a lane's run (first + lane * ITEMS_PER_THREAD, j), as store_runs reads it too."""
    for section, items in accepted_shapes(algorithm, dtype):
        spec = make_spec(dtype, "add", algorithm=algorithm, section_size=section,
                         items_per_thread=items)
        pad, block = spec.pad_every, spec.block_size
        assert pad > 0
        thread = np.arange(block)[None, :]
        k = np.arange(items)[:, None]
        pairs = [(thread, k * block), (thread[:, 1:] - 1, k * block)]
        if block % 32 == 0:
            first, lane = thread // 32 * 32 * items, thread % 32
            pairs += [(first + lane, k * 32), (first + lane * items, k)]
        for a, b in pairs:
            np.testing.assert_array_equal(_slot_sum(a, b, pad), _slot(a + b, pad),
                                          err_msg=f"{spec.block_size}x{items}, pad {pad}")


# --- user operators ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_user_operators_render(algorithm, mode):
    for strategy in STRATEGIES:
        for dtype, op in [("uint8", SATURATING_ADD), ("int32", TABLE_LOOKUP),
                          ("uint64", AFFINE), ("float64", LAST_NONZERO),
                          ("int16", LAST_NONZERO)]:
            text = check_module(Scan(dtype, op, mode=mode, algorithm=algorithm,
                                     strategy=strategy))
            if op.preamble:
                assert text.count(op.preamble.strip()) == 1


def test_preambles_with_braces_come_out_verbatim():
    text = render(Scan("int32", TABLE_LOOKUP).kernel.scan_module).text
    assert "{{0, 1}, {1, 0}}" in text
    kernel = ScanKernel("int32", "add", **TABLE_PREAMBLE)
    assert "static __device__ const int kFlip[2][2] = {{0, 1}, {1, 0}};" in kernel.source
    check_module(kernel)
    # both preambles at once, each in its own span
    both = ScanKernel("int32", TABLE_LOOKUP, **TABLE_PREAMBLE)
    check_module(both)
    spans = render(both.scan_module).user_spans
    assert {"operator preamble", "preamble"} <= set(spans)


def test_expression_and_identity_per_type_from_callables():
    op = Operator(lambda t: f"(a < b ? b : a) /* {t.c_name} */",
                  lambda t: t.lowest(), name="typed_max")
    for dtype in DTYPES:
        if dtype.startswith("complex"):
            continue  # complex values have no lowest()
        scan = Scan(dtype, op)
        text = check_module(scan)
        assert f"/* {scan.spec.etype.c_name} */" in text


def test_different_specs_render_differently():
    base = dict(mode="inclusive", algorithm="kogge_stone", section_size=256,
                strategy="hierarchical")
    texts = {
        Scan("int32", "add", **base).source,
        Scan("uint32", "add", **base).source,
        Scan("int32", "max", **base).source,
        Scan("int32", "add", **{**base, "mode": "exclusive"}).source,
        Scan("int32", "add", **{**base, "section_size": 512}).source,
        Scan("int32", "add", **{**base, "algorithm": "brent_kung"}).source,
        Scan("int32", "add", **{**base, "strategy": "reduce_then_scan"}).source,
        Scan("int32", "add", **{**base, "strategy": "chained"}).source,
        Scan("int32", "add", **{**base, "strategy": "decoupled_lookback"}).source,
        Scan("int32", Operator("a + b", 0, name="plus"), **base).source,
    }
    assert len(texts) == 10


def test_identity_literals_of_extremes_are_emitted():
    cases = [("float32", "max", "-inf"), ("float32", "min", "inf"), ("float64", "max", "-inf"),
             ("int64", "max", -2**63), ("uint64", "min", 2**64 - 1), ("int8", "max", -128),
             ("uint16", "bit_and", 65535)]
    for dtype, op, value in cases:
        scan = Scan(dtype, op)
        spec = scan.spec
        assert spec.identity_literal == spec.etype.literal(float(value) if isinstance(value, str)
                                                           else value)
        check_module(scan)


def test_source_of_a_scan_is_its_rendered_module():
    scan = Scan("int16", LAST_NONZERO, mode="exclusive", algorithm="coarsened",
                section_size=512, items_per_thread=8)
    assert scan.source == scan.kernel.source == render(scan.kernel.scan_module).text
    assert scan.spec == scan.kernel.scan_module.scan and not hasattr(scan.spec, "mode")
    check_module(scan)
    # the mode is the output statement: prev_item for exclusive, item for inclusive
    assert render(scan.kernel.scan_module).user_spans["output_statement"]
    assert "out[i] = prev_item;" in scan.source
    assert "out[i] = item;" in Scan("int16", LAST_NONZERO).source


# --- ScanKernel modules -----------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_scan_kernels_render_for_every_strategy(strategy, algorithm):
    compaction = ScanKernel("int64", "add", **COMPACTION, strategy=strategy, algorithm=algorithm)
    check_module(compaction)
    affine = ScanKernel("uint64", AFFINE, **AFFINE_MAPS, strategy=strategy, algorithm=algorithm)
    check_module(affine)
    assert affine.scan_module.kernels == compaction.scan_module.kernels
    if strategy in TOTAL_STRATEGIES:
        partition = ScanKernel("int64", "add", **PARTITION, strategy=strategy,
                               algorithm=algorithm)
        assert partition.scan_module.hooks.uses_last_item
        check_module(partition)
    else:
        with pytest.raises(ValueError, match="last_item"):
            ScanKernel("int64", "add", **PARTITION, strategy=strategy, algorithm=algorithm)


def test_auto_with_last_item_has_no_single_pass_kernel():
    partition = ScanKernel("int64", "add", **PARTITION)
    compaction = ScanKernel("int64", "add", **COMPACTION)
    assert partition.spec.strategy == compaction.spec.strategy == "auto"
    with_total = [k.name for k in partition.scan_module.kernels]
    without = [k.name for k in compaction.scan_module.kernels]
    # 8-byte counts: the persistent single pass at every size, and no classic one
    single_pass = ("scan_tiles_user", "scan_tiles_persistent_user")
    assert "scan_tiles_persistent_user" in without and not set(single_pass) & set(with_total)
    assert with_total == [name for name in without if name not in single_pass]
    assert not any(k.family.single_pass for k in partition.scan_module.kernels)
    text = check_module(partition)
    # no single-pass machinery at all: no tile kernel, no tile status, no look-back
    for absent in ("scan_tiles", "look_back", "wait_for_predecessor", "FLAG_PREFIX"):
        assert absent not in text, absent
    assert "look_back" in check_module(compaction)


def test_last_item_in_a_comment_or_string_is_not_a_use():
    kernel = ScanKernel("int64", "add", **dict(
        COMPACTION, output_statement=COMPACTION["output_statement"] + " // not last_item"),
        strategy="chained")
    assert not kernel.scan_module.hooks.uses_last_item
    check_module(kernel)


def test_segmented_scan_kernels_render():
    for dtype, strategy in itertools.product(("int8", "int16", "float32", "float64"),
                                             STRATEGIES):
        kernel = ScanKernel(dtype, LAST_NONZERO,
                            arguments="const scan_t *x, const unsigned char *heads, scan_t *out",
                            input_expr="x[i]", is_segment_start_expr="heads[i] != 0",
                            output_statement="out[i] = prev_item;", strategy=strategy)
        assert kernel.spec.segmented
        check_module(kernel)


def test_user_pieces_are_found_by_line():
    kernel = ScanKernel("uint64", AFFINE, **AFFINE_MAPS,
                        preamble="static __device__ int unused_helper() { return 0; }")
    module = render(kernel.scan_module)
    lines = module.text.splitlines()
    pieces = user_pieces(kernel.scan_module)
    assert set(module.user_spans) == {"operator preamble", "operator", "preamble",
                                      "input_expr", "output_statement"}
    for piece, text in pieces.items():
        first, last = module.user_spans[piece]
        assert lines[first - 1:last] == text.splitlines(), piece
        for line in range(first, last + 1):
            assert module.user_piece_at(line) == piece
        # the marker lines around a piece are scangen's
        assert module.user_piece_at(first - 1) is None
        assert module.user_piece_at(last + 1) is None
        # the line after its end marker is where nvcc reports the piece cut short
        assert module.user_piece_before(last + 2) == piece
        assert module.user_piece_before(last + 1) != piece
    first, last = module.user_spans["operator preamble"]
    assert last - first + 1 == len(AFFINE.preamble.strip().splitlines()) > 1
    assert module.user_spans["input_expr"][0] == module.user_spans["input_expr"][1]
    assert lines[module.user_spans["input_expr"][0] - 1] == AFFINE_MAPS["input_expr"]


def test_a_title_is_only_ever_a_comment():
    plain = ScanKernel("float32", "add", arguments="const float *x, float *out",
                       input_expr="x[i]", output_statement="out[i] = item;", title="running sum")
    multi = ScanKernel("float32", "add", arguments="const float *x, float *out",
                       input_expr="x[i]", output_statement="out[i] = item;",
                       title="running sum\nof x")
    assert code_only(multi.source) == code_only(plain.source)


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
assert 'extern "C" __global__' in text and "scan_tiles_user(" in text, text[:200]
assert "out[i] = prev_item;" in text
plan = scan.plan(10**6 + 3)
assert plan.launches and plan.describe()
user = scangen.Scan("uint8", scangen.Operator("b != 0 ? b : a", 0, name="last"))
assert "b != 0 ? b : a" in user.source
compact = scangen.ScanKernel("int64", "add",
                             arguments="const float *x, float *out, long long *count",
                             input_expr="x[i] > 0.5f ? 1 : 0",
                             output_statement="if (prev_item != item) out[prev_item] = x[i];")
assert "x[i] > 0.5f ? 1 : 0" in compact.source
assert compact.plan(10**6).launches
assert "pycuda" not in sys.modules, sorted(m for m in sys.modules if "pycuda" in m)
if BLOCK:
    class DeviceArray:  # what a CuPy or Numba array shows scangen
        __cuda_array_interface__ = dict(shape=(4,), typestr="<f4", data=(0x1000, False),
                                        version=3)

    for call in (lambda: scan(DeviceArray()),
                 lambda: compact(*(scangen.DevicePointer(0x1000, dtype, 4)
                                   for dtype in (np.float32, np.float32, np.int64)))):
        try:
            call()
        except scangen.GPUUnavailableError as err:
            message = str(err)
            assert "PyCUDA" in message and "pip install" in message, message
            assert ".source" in message, message
        else:
            raise AssertionError("calling a kernel without pycuda did not raise")
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


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("algorithm,section,items", [("warp_shuffle", None, None),
                                                     ("warp_shuffle", 16, 1),
                                                     ("kogge_stone", 1024, None)])
def test_tile_warp_runs_only_where_it_applies(strategy, algorithm, section, items):
    """Tuning.tile_warp_runs changes the single-pass tile kernel of the warp_shuffle algorithm
    in blocks of whole warps, and nothing else: other kernels, algorithms and a 16-thread
    block render as without it."""
    options = dict(strategy=strategy, algorithm=algorithm, section_size=section,
                   items_per_thread=items)
    plain = Scan("float32", "add", tuning=Tuning(tile_warp_runs=False), **options)
    runs = Scan("float32", "add", tuning=Tuning(tile_warp_runs=True), **options)
    applies = (strategy in ("auto", "chained", "decoupled_lookback")
               and algorithm == "warp_shuffle" and runs.spec.block_size % 32 == 0)
    assert runs.spec.uses_warp_runs == (algorithm == "warp_shuffle"
                                        and runs.spec.block_size % 32 == 0)
    assert ("items_to_run(data, items, run);" in runs.kernel.source) == applies
    assert "items_to_run(data" not in plain.kernel.source
    if not applies:  # the same text, but for the tuning in nothing at all
        assert runs.kernel.source == plain.kernel.source


VECTOR = Tuning(tile_vector_runs=True)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float16", "float32", "float64",
                                   "complex128"])
@pytest.mark.parametrize("mode", MODES)
def test_vector_runs_move_plain_scans_in_words(dtype, mode):
    """Tuning.tile_vector_runs: a plain Scan's single pass (both kernels) loads, keeps and
    writes each lane's run in 16-byte words, through x and out. By default for 1-byte
    values only; warp runs for the others."""
    for strategy in ("auto", "decoupled_lookback"):
        scan = Scan(dtype, "add", mode=mode, strategy=strategy, tuning=VECTOR)
        assert scan.kernel.scan_module.vector_runs == PlainArrays("x", "out",
                                                                  mode == "exclusive")
        source = scan.kernel.source
        assert "load_vector_run(io.x, start, n, run);" in source
        assert "emit_vector_run(io.out, data" in source
        assert "items_to_run(" not in source and "store_runs(" not in source
        default = Scan(dtype, "add", mode=mode, strategy=strategy)
        if np.dtype(dtype).itemsize == 1:
            assert default.kernel.source == source
        else:
            assert default.kernel.scan_module.vector_runs is None
            assert "vector_run" not in default.kernel.source


@pytest.mark.parametrize("source, result", [("uint8", "int32"), ("int16", "int64"),
                                            ("float16", "float32"), ("int32", "float64")])
def test_vector_runs_convert_what_they_load(source, result):
    """A result type wider than the input's: the run loads the input's elements in words
    and converts each as the input expression says (numpy's cumsum of uint8 is one)."""
    scan = Scan(source, "add", result_dtype=result, tuning=VECTOR)
    plain = scan.kernel.scan_module.vector_runs
    assert plain is not None and plain.input_c != "scan_t"
    assert plain.input_itemsize == np.dtype(source).itemsize
    source_text = scan.kernel.source
    assert f"typedef {plain.input_c} vector_in_t;" in source_text
    assert f"return ({plain.input_expr});" in source_text


@pytest.mark.parametrize("what, make", [
    ("tuning off", lambda: Scan("uint8", "add", tuning=Tuning(tile_vector_runs=False))),
    ("a 1-byte input widened", lambda: Scan("uint8", "add", result_dtype="int32")),
    ("reverse", lambda: Scan("uint8", "add", reverse=True, tuning=VECTOR)),
    ("initial", lambda: Scan("uint8", "add", initial=3, tuning=VECTOR)),
    ("an input run of 2 bytes", lambda: Scan("uint8", "add", result_dtype="float64",
                                             algorithm="warp_shuffle", section_size=512,
                                             items_per_thread=2, tuning=VECTOR)),
    ("8-byte runs", lambda: Scan("uint8", "add", section_size=1024, items_per_thread=8,
                                 tuning=VECTOR)),
    ("staged block scan", lambda: Scan("float32", "add", algorithm="kogge_stone",
                                       tuning=VECTOR)),
    ("segmented", lambda: SegmentedScan("float32", tuning=VECTOR).kernel("flags")),
    ("user hooks", lambda: ScanKernel("float32", "add", arguments="const float *x, float *out",
                                      input_expr="x[i]", output_statement="out[i] = item;",
                                      tuning=VECTOR)),
])
def test_vector_runs_only_where_the_hooks_are_plain_arrays(what, make):
    scan = make()
    kernel = getattr(scan, "kernel", scan)
    assert kernel.scan_module.vector_runs is None, what
    assert "vector_run" not in kernel.source


def test_plain_arrays_must_be_the_hooks_they_describe():
    with pytest.raises(ValueError, match="does not describe"):
        ScanKernel("float32", "add", arguments="const float *x, float *out",
                   input_expr="x[i] * 2", output_statement="out[i] = item;",
                   _plain_arrays=PlainArrays("x", "out", False))
    with pytest.raises(ValueError, match="does not describe"):
        ScanKernel("float32", "add", arguments="const float *x, float *out",
                   input_expr="x[i]", output_statement="out[i] = item;",
                   _plain_arrays=PlainArrays("x", "out", True))


@pytest.mark.parametrize("dtype,width", [("int8", 1), ("float32", 1), ("int32", 1),
                                         ("float64", 1), ("int64", 1), ("complex128", 1)])
def test_lookback_width_by_value_size(dtype, width):
    """The look-back reads scangen.tuning.SCAN's lookback_tiles_per_lane tiles per lane (by
    value size) unless the Tuning names a width; a bad width is refused."""
    default = Scan(dtype, "add", strategy="decoupled_lookback").kernel.source
    per_lane = "const int PER_LANE = {};  // Tuning.lookback_tiles_per_lane"
    assert per_lane.format(width) in default
    named = Scan(dtype, "add", strategy="decoupled_lookback",
                 tuning=Tuning(lookback_tiles_per_lane=7)).kernel.source
    assert per_lane.format(7) in named
    for bad in (0, 33, 2.0):
        with pytest.raises(ValueError, match="lookback_tiles_per_lane"):
            Tuning(lookback_tiles_per_lane=bad)
