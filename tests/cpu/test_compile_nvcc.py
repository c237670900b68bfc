"""Compile a representative matrix of rendered modules with nvcc (no GPU needed).

Skips when nvcc is not on PATH. To stay fast, modules are batched: each batch is ONE .cu
file in which every rendered module sits in its own ``namespace m<i> { ... }``, the whole
inside ``extern "C++" { ... }`` (the rendered text has no extern "C" and no #include; PyCUDA
normally wraps it in extern "C"). Batches compile in parallel with
``nvcc -cubin -arch=sm_90 --resource-usage``; errors and warnings are mapped back to the
module (and so the spec) they come from, and ptxas's per-kernel shared memory is checked
against the 48 KiB static limit and against what the spec claims.
"""
import concurrent.futures
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import pytest

from scangen import (ALGORITHMS, BUILTIN_OPERATORS, ELEMENT_TYPES, LAST_NONZERO, MODES,
                     Operator, make_spec)
from scangen.render import kernel_names, render
from scangen.spec import MAX_STATIC_SHARED_BYTES

NVCC = shutil.which("nvcc")
ARCH = "sm_90"

pytestmark = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: the rendered CUDA is compiled only where the "
                         "CUDA toolkit is installed (rendering itself is tested in test_render)")

DTYPES = [t.name for t in ELEMENT_TYPES.values()]
#: Every strategy that renders different kernels ("auto" renders decoupled_lookback's).
STRATEGIES = ("hierarchical", "reduce_then_scan", "chained", "decoupled_lookback")


# --- user operators -------------------------------------------------------------------------

SATURATING_ADD = Operator(
    "sat_add(a, b)", 0, name="sat_add",
    preamble="""
static __device__ __forceinline__ unsigned char sat_add(unsigned char a, unsigned char b)
{
    const unsigned int s = (unsigned int)a + (unsigned int)b;
    return s > 255u ? (unsigned char)255 : (unsigned char)s;
}""")

#: x -> m*x + c (mod 2^32) packed as m << 32 | c; combine(a, b) applies a, then b.
AFFINE = Operator(
    "affine_then(a, b)", 1 << 32, name="affine_then",
    preamble="""
static __device__ __forceinline__ unsigned long long affine_then(unsigned long long a,
                                                                 unsigned long long b)
{
    const unsigned long long mask = 0xFFFFFFFFull;
    const unsigned long long m = ((b >> 32) * (a >> 32)) & mask;
    const unsigned long long c = ((b >> 32) * (a & mask) + (b & mask)) & mask;
    return (m << 32) | c;
}""")

GCD = Operator(
    "gcd_of(a, b)", 0, name="gcd",
    preamble="""
static __device__ int gcd_of(int a, int b)
{
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b != 0) {
        const int t = a % b;
        a = b;
        b = t;
    }
    return a;
}""")

TABLE_LOOKUP = Operator(
    "pick(a, b)", 0, name="table_pick",
    preamble="static __device__ const int kTable[2][2] = {{0, 1}, {1, 0}};\n"
             "static __device__ __forceinline__ int pick(int a, int b) "
             "{ return b != 0 ? b : a + kTable[0][0]; }")

TYPED_MAX = Operator(lambda t: f"(a < b ? b : a)", lambda t: t.lowest(), name="typed_max")


# --- the batches ----------------------------------------------------------------------------

def _spec(dtype, op="add", **kwargs):
    return make_spec(dtype, op, **kwargs)


def _valid(op, dtype):
    return not (BUILTIN_OPERATORS[op].integer_only and np.dtype(dtype).kind == "f")


def _shapes(algorithm, dtype):
    """Sections worth compiling: the smallest, sub-warp, one warp, two warps, 1024 threads,
    for the algorithm's own coarsening and (where it is a parameter) several others."""
    items_choices = [None, 1, 2, 8, 32] if ALGORITHMS[algorithm].coarsening_is_parameter \
        else [None]
    shapes = set()
    for items, exponent in itertools.product(items_choices, range(0, 16)):
        try:
            spec = make_spec(dtype, "add", algorithm=algorithm, section_size=2**exponent,
                             items_per_thread=items)
        except ValueError:
            continue
        if spec.block_size in (1, 2, 16, 32, 64, 1024):
            shapes.add((spec.section_size, spec.items_per_thread))
    return sorted(shapes)


def batch_algorithms(dtype):
    return [(f"{a} {m} {s} {dtype}", _spec(dtype, "add", mode=m, algorithm=a, strategy=s))
            for a, m, s in itertools.product(ALGORITHMS, MODES, STRATEGIES)]


def batch_sections():
    dtypes = itertools.cycle(["uint16", "float32", "int64", "int8", "float64"])
    strategies = itertools.cycle(STRATEGIES)
    modes = itertools.cycle(MODES)
    modules = []
    for algorithm in ALGORITHMS:
        for section, items in _shapes(algorithm, "float64"):
            dtype, strategy, mode = next(dtypes), next(strategies), next(modes)
            modules.append((f"{algorithm} section {section} x{items} {dtype} {mode} {strategy}",
                            _spec(dtype, "max", mode=mode, algorithm=algorithm,
                                  section_size=section, items_per_thread=items,
                                  strategy=strategy)))
    return modules


def batch_types_hierarchical():
    # An inclusive hierarchical module holds both block scans and add_prefixes.
    return [(f"{d} {o}", _spec(d, o, algorithm="warp_shuffle", strategy="hierarchical"))
            for d, o in itertools.product(DTYPES, BUILTIN_OPERATORS) if _valid(o, d)]


def batch_types_strategies():
    modules = []
    ops = itertools.cycle(["max", "min", "add", "mul"])
    algorithms = itertools.cycle(ALGORITHMS)
    for dtype in DTYPES:
        for strategy in ("chained", "decoupled_lookback", "reduce_then_scan"):
            op = next(ops)
            modules.append((f"{dtype} {op} exclusive {strategy}",
                            _spec(dtype, op, mode="exclusive", strategy=strategy,
                                  algorithm=next(algorithms))))
        modules.append((f"{dtype} last_nonzero inclusive decoupled_lookback",
                        _spec(dtype, LAST_NONZERO, strategy="decoupled_lookback")))
    return modules


def batch_user_operators():
    modules = []
    strategies = itertools.cycle(STRATEGIES)
    for algorithm, mode in itertools.product(ALGORITHMS, MODES):
        modules.append((f"last_nonzero int32 {algorithm} {mode} hierarchical",
                        _spec("int32", LAST_NONZERO, mode=mode, algorithm=algorithm,
                              strategy="hierarchical")))
        for dtype, op in [("uint8", SATURATING_ADD), ("uint64", AFFINE), ("int32", GCD)]:
            strategy = next(strategies)
            modules.append((f"{op.name} {dtype} {algorithm} {mode} {strategy}",
                            _spec(dtype, op, mode=mode, algorithm=algorithm, strategy=strategy)))
    modules.append(("table_pick int32", _spec("int32", TABLE_LOOKUP)))
    for dtype in ("int16", "float32"):
        modules.append((f"typed_max {dtype}", _spec(dtype, TYPED_MAX, mode="exclusive")))
    # identities at the edges of the types: infinities spelled through bits, INT64_MIN,
    # UINT64_MAX, all-ones
    for algorithm in ALGORITHMS:
        for dtype, op in [("float32", "max"), ("float64", "min"), ("int64", "max"),
                          ("uint64", "min"), ("int64", "bit_and")]:
            strategy = next(strategies)
            modules.append((f"{dtype} {op} {algorithm} exclusive {strategy}",
                            _spec(dtype, op, mode="exclusive", algorithm=algorithm,
                                  strategy=strategy)))
    return modules


BATCHES = {
    "algorithms_int8": lambda: batch_algorithms("int8"),
    "algorithms_float64": lambda: batch_algorithms("float64"),
    "sections": batch_sections,
    "types_hierarchical": batch_types_hierarchical,
    "types_strategies": batch_types_strategies,
    "user_operators": batch_user_operators,
}


# --- batching and compiling -----------------------------------------------------------------

@dataclass
class Module:
    label: str
    spec: object
    text: str
    first_line: int = 0
    last_line: int = 0


@dataclass
class Compiled:
    returncode: int
    stderr: str
    modules: list
    #: (module index, kernel name) -> static shared bytes reported by ptxas
    shared: dict = field(default_factory=dict)

    def module_at(self, line):
        for index, module in enumerate(self.modules):
            if module.first_line <= line <= module.last_line:
                return index, module
        return None, None

    def diagnostics(self, kind):
        """(module label, message) for each `file.cu(LINE): <kind> ...` nvcc printed."""
        found = []
        for match in re.finditer(rf"\.cu\((\d+)\): {kind}[^\n]*", self.stderr):
            _, module = self.module_at(int(match.group(1)))
            found.append((module.label if module else "outside any module", match.group(0)))
        found += [("ptxas", m.group(0)) for m in
                  re.finditer(rf"ptxas {kind}[^\n]*", self.stderr, re.IGNORECASE)]
        return found


def write_batch(path, entries):
    """One .cu file: each module in its own namespace, all inside extern "C++"."""
    lines = ['extern "C++" {']
    modules = []
    for index, (label, spec_or_text) in enumerate(entries):
        if isinstance(spec_or_text, str):
            spec, text = None, spec_or_text
        else:
            spec, text = spec_or_text, render(spec_or_text).text
        lines.append(f"// ---- module {index}: {label}")
        lines.append(f"namespace m{index} {{")
        first = len(lines) + 1
        lines.extend(text.splitlines())
        modules.append(Module(label, spec, text, first, len(lines)))
        lines.append(f"}}  // namespace m{index}")
    lines.append('}  // extern "C++"')
    path.write_text("\n".join(lines) + "\n")
    return modules


def _demangle(name):
    """_ZN<len>m<i><len><kernel>E... -> (i, kernel)."""
    match = re.match(r"_ZN(\d+)", name)
    if not match:
        return None, name
    length, position = int(match.group(1)), match.end()
    namespace = name[position:position + length]
    position += length
    match = re.match(r"(\d+)", name[position:])
    length, position = int(match.group(1)), position + match.end()
    return int(namespace[1:]), name[position:position + length]


def run_nvcc(path, modules):
    result = subprocess.run(
        [NVCC, "-cubin", f"-arch={ARCH}", "--resource-usage", "-o",
         str(path.with_suffix(".cubin")), str(path)],
        capture_output=True, text=True, timeout=600)
    compiled = Compiled(result.returncode, result.stderr + result.stdout, modules)
    entry = None
    for line in compiled.stderr.splitlines():
        match = re.search(r"Compiling entry function '(\w+)'", line)
        if match:
            entry = _demangle(match.group(1))
            continue
        match = re.search(r"Used \d+ registers.*?(?:, (\d+) bytes smem)?\s*$", line)
        if match and entry is not None:
            compiled.shared[entry] = int(match.group(1) or 0)
            entry = None
    return compiled


def _probe(directory):
    """Can this nvcc build sm_90 device code at all (host preprocessor, arch support)?"""
    path = directory / "probe.cu"
    path.write_text('extern "C++" { namespace m0 { __global__ void k(int *p) { *p = 1; } } }\n')
    result = subprocess.run([NVCC, "-cubin", f"-arch={ARCH}", "-o",
                             str(path.with_suffix(".cubin")), str(path)],
                            capture_output=True, text=True, timeout=300)
    return None if result.returncode == 0 else (result.stderr or result.stdout)[-2000:]


#: A typo'd user expression among good modules (batching must not hide the error), and a
#: module with a planted unused variable (the warning check must see warnings).
TYPO_INDEX, CANARY_INDEX = 2, 0


def typo_entries():
    canary = render(_spec("int16", "min")).text + "\nstatic const int UNUSED_CANARY = 1;\n"
    typo = _spec("int32", Operator("a +* b", 0, name="typo"), strategy="hierarchical")
    return [("canary: int16 min + unused variable", canary),
            ("good float64 max", _spec("float64", "max", strategy="hierarchical")),
            ("typo 'a +* b'", typo),
            ("good uint8 last_nonzero", _spec("uint8", LAST_NONZERO))]


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """Batch name -> Future of its Compiled result; every batch starts at once."""
    directory = tmp_path_factory.mktemp("nvcc")
    problem = _probe(directory)
    if problem:
        pytest.skip(f"nvcc cannot build {ARCH} code here:\n{problem}")
    entries = {name: build() for name, build in BATCHES.items()}
    entries["typo"] = typo_entries()
    workers = max(2, os.cpu_count() or 2)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    futures = {}
    # biggest batches first, so the pool ends evenly
    for name in sorted(entries, key=lambda n: -len(entries[n])):
        path = directory / f"{name}.cu"
        modules = write_batch(path, entries[name])
        futures[name] = pool.submit(run_nvcc, path, modules)
    yield {name: future for name, future in futures.items()}
    pool.shutdown(wait=True)


def _result(compiled, name):
    return compiled[name].result()


# --- the tests --------------------------------------------------------------------------------

def test_batches_cover_the_matrix():
    specs = [spec for build in BATCHES.values() for _, spec in build()]
    assert {(s.algorithm, s.mode) for s in specs} == set(itertools.product(ALGORITHMS, MODES))
    assert {s.strategy for s in specs} >= set(STRATEGIES)
    assert {(s.etype.name, s.operator.name) for s in specs} >= \
        {(d, o) for d, o in itertools.product(DTYPES, BUILTIN_OPERATORS) if _valid(o, d)}
    assert {s.operator.name for s in specs} >= {"last_nonzero", "sat_add", "affine_then", "gcd",
                                                "table_pick", "typed_max"}
    assert len(specs) >= 250


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_compiles(compiled, name):
    result = _result(compiled, name)
    errors = result.diagnostics("error")
    assert result.returncode == 0, (
        f"nvcc failed on batch {name}: {len(errors)} error(s) in modules "
        f"{sorted({label for label, _ in errors})}\n{result.stderr[-4000:]}")


@pytest.mark.parametrize("name", list(BATCHES))
def test_batch_has_no_warnings(compiled, name):
    result = _result(compiled, name)
    warnings = result.diagnostics("warning")
    assert not warnings, "\n".join(f"[{label}] {message}" for label, message in warnings)


@pytest.mark.parametrize("name", list(BATCHES))
def test_every_kernel_is_in_the_cubin(compiled, name):
    result = _result(compiled, name)
    assert result.returncode == 0, f"batch {name} did not compile"
    for index, module in enumerate(result.modules):
        for kernel in kernel_names(module.spec):
            assert (index, kernel) in result.shared, f"[{module.label}] no entry {kernel}"
    assert len(result.shared) == sum(len(kernel_names(m.spec)) for m in result.modules)


@pytest.mark.parametrize("name", list(BATCHES))
def test_static_shared_memory_fits(compiled, name):
    result = _result(compiled, name)
    assert result.returncode == 0, f"batch {name} did not compile"
    for (index, kernel), used in result.shared.items():
        module = result.modules[index]
        assert used <= MAX_STATIC_SHARED_BYTES, f"[{module.label}] {kernel}: {used} B"
        if kernel.startswith("scan_sections_"):
            # what make_spec validated is what the section kernels really use
            assert used <= module.spec.shared_bytes, \
                f"[{module.label}] {kernel} uses {used} B, spec says {module.spec.shared_bytes}"


def test_spec_shared_bytes_bounds_every_kernel(compiled):
    over = []
    for name in BATCHES:
        result = _result(compiled, name)
        for (index, kernel), used in result.shared.items():
            module = result.modules[index]
            if used > module.spec.shared_bytes:
                over.append(f"[{module.label}] {kernel}: {used} > {module.spec.shared_bytes}")
    assert not over, "\n".join(over[:20])


def test_a_typo_in_one_module_fails_the_batch_and_is_located(compiled):
    result = _result(compiled, "typo")
    assert result.returncode != 0
    errors = result.diagnostics("error")
    assert errors, result.stderr
    assert {label for label, _ in errors} == {result.modules[TYPO_INDEX].label}, errors
    warnings = result.diagnostics("warning")
    assert {label for label, _ in warnings} == {result.modules[CANARY_INDEX].label}, warnings
    assert "UNUSED_CANARY" in result.stderr
