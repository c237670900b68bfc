"""scangen's import graph, read from the source (no module is imported): no circles, no
upward imports, and no imports inside functions but those of optional dependencies.

The layers, lowest first; a module imports modules of its own layer or lower ones:

1. foundation: usercode, arith, types, args, ops, tuning, families (C code, element types,
   operators, kernel arguments, tuning tables, the kernel families)
2. strategies: how sections are stitched into a whole-array scan (pure descriptions)
3. spec: the validated scan spec, and the numpy reference scan
4. plan: kernels, grids and temporaries for one n
5. render: Jinja2 -> CUDA text
6. runtime: PyCUDA imported lazily and the device (runtime.gpu), the CUDA context lifecycle
   (runtime.contexts), streams, pooled memory, per-stream scratch, the GPU thread
7. compile: nvcc or NVRTC (nvrtc) and the loaded modules, cached per context; the base of
   modules with kernels of their own (modules: described, planned, compiled)
8. interop: other libraries' arrays and streams, a call's arguments (dlpack: DLPack's
   tensors, read and handed over)
9. launch: a plan bound to compiled kernels and scratch (runtime.launcher; runtime.modules
   for modules with kernels of their own)
10. scans: ScanKernel, Scan, SegmentedScan, the operator check, the one-shot scans
11. primitives: compositions of scans and kernels of their own
12. past one GPU: chunked, dask, out_of_core
13. the package (scangen/__init__.py: the public names)
14. tools: workloads, bench, cli, __main__

Everything up to render imports no CUDA package; pycuda (and the other optional libraries
below) are imported inside the functions that need them, so ``import scangen`` works on a
machine without them. Any other import sits at the top of its module, where a reader sees
what the module depends on. A module not listed here fails the test until it is given a
layer.
"""
from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import scangen

PACKAGE = Path(scangen.__file__).resolve().parent

LAYERS = [
    ("foundation", ["usercode", "arith", "cache", "devices", "types", "args", "ops", "tuning",
                    "families", "heads"]),
    ("strategies", ["strategies", "strategies.*"]),
    ("spec", ["spec", "reference"]),
    ("plan", ["plan"]),
    ("render", ["render"]),
    ("runtime", ["runtime", "runtime.gpu", "runtime.contexts", "runtime.streams",
                 "runtime.pool", "runtime.scratch", "runtime.mapped", "runtime.gpu_thread"]),
    ("compile", ["nvrtc", "compile", "modules"]),
    ("interop", ["dlpack", "interop"]),
    ("launch", ["runtime.launcher", "runtime.modules"]),
    ("scans", ["kernel", "lines", "scan", "segmented", "check", "one_shot", "operands"]),
    ("primitives", ["primitives", "primitives.*"]),
    ("past one GPU", ["chunked", "dask", "out_of_core"]),
    ("frameworks", ["torch"]),
    ("package", [""]),
    ("tools", ["workloads", "bench", "primitive_bench", "axis_bench", "tune", "info", "cli",
               "__main__"]),
]

#: Third-party packages a function may import: optional ones, so that ``import scangen``
#: needs none of them.
OPTIONAL = {"pycuda", "cupy", "torch", "dask", "distributed", "dask_cuda", "ml_dtypes",
            "matplotlib"}


def _modules() -> dict[str, Path]:
    """scangen's modules by dotted name (the package itself is "scangen")."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["scangen", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> int:
    name = module[len("scangen."):] if module != "scangen" else ""
    for index, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            return index
    raise AssertionError(f"{module} has no layer: add it to LAYERS in {__file__}")


class Import:
    """One import statement's target, as the importer sees it."""

    def __init__(self, importer, target, line, function):
        self.importer, self.target, self.line, self.function = importer, target, line, function

    def __repr__(self):
        where = f" in {self.function}()" if self.function else ""
        return f"{self.importer}:{self.line}{where} imports {self.target}"


def _targets(node, module: str) -> list[str]:
    """Absolute module names an import statement names (for ``from X import name``: the
    submodule X.name where there is one, else X)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        base = ".".join(base + ([node.module] if node.module else []))
    else:
        base = node.module
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            for alias in node.names]


def _imports(module: str) -> list[Import]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(Import(module, target, child.lineno, function)
                             for target in _targets(child, module))
            inner = child.name if isinstance(child, (ast.FunctionDef,
                                                     ast.AsyncFunctionDef)) else function
            visit(child, inner)

    visit(tree, None)
    return found


IMPORTS = [i for module in MODULES for i in _imports(module)]


def _own(target: str) -> str | None:
    """The scangen module an import loads last (``scangen.a.b`` for ``from .a.b import
    x``), or None for another package's."""
    return target if target in MODULES else None


def graph() -> dict[str, set[str]]:
    """Module -> the scangen modules importing it loads: what it names, and the packages
    those sit in (``from .runtime.streams import x`` runs scangen/runtime/__init__.py
    first). The root package is left out: it is loaded before any of its modules."""
    edges = {module: set() for module in MODULES}
    for imp in IMPORTS:
        target = _own(imp.target)
        if target is None:
            continue
        parts = target.split(".")
        for end in range(2, len(parts) + 1):
            loaded = ".".join(parts[:end])
            # A package being loaded is in sys.modules before its modules run: the module
            # of a package importing a sibling does not load the package again.
            inside = end < len(parts) and imp.importer.startswith(loaded + ".")
            if loaded != imp.importer and loaded in MODULES and not inside:
                edges[imp.importer].add(loaded)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    return found


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_circles():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_upward_imports():
    upward = []
    for imp in IMPORTS:
        target = _own(imp.target)
        if target is not None and layer_of(target) > layer_of(imp.importer):
            upward.append(f"{imp} ({LAYERS[layer_of(imp.importer)][0]} -> "
                          f"{LAYERS[layer_of(target)][0]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_functions_import_only_optional_dependencies():
    inside = [imp for imp in IMPORTS if imp.function is not None
              and imp.target.partition(".")[0] not in OPTIONAL]
    assert not inside, "imports inside functions:\n" + "\n".join(map(repr, inside))


def test_the_graph_sees_circles_and_relative_imports():
    """The reader itself: relative imports resolve to modules, and a circle is found."""
    assert {"scangen.strategies.tile_state", "scangen.strategies"} <= \
        graph()["scangen.runtime.scratch"]
    assert {"scangen.primitives.radix", "scangen.modules"} <= \
        graph()["scangen.primitives.histogram"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_importing_every_module_loads_no_optional_library():
    """What the function-level imports are for: every scangen module imports on a machine
    without the optional libraries, and loads none of them where they are installed."""
    script = ("import importlib, sys\n"
              f"for name in {sorted(MODULES)!r}:\n"
              "    importlib.import_module(name)\n"
              "print(sorted(m for m in sys.modules if m.partition('.')[0] in "
              f"{sorted(OPTIONAL)!r}))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=PACKAGE.parent, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
