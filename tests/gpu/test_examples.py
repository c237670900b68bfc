"""The examples, the python blocks of the README and the guide and `python -m scangen
demo`, run on the GPU.

Each skips visibly without PyCUDA or a device (the ``gpu`` fixture); with
SCANGEN_REQUIRE_GPU=1 they fail instead.
"""
import ast
from pathlib import Path

import numpy as np
import pytest

from tests.support import (AFFINE_PAIRS, assert_scan_equal, docs_python_blocks,
                           exact_affine_pairs, load_example, reference, require_module,
                           run_docs_block)

ROOT = Path(__file__).resolve().parents[2]


def test_sandwich(gpu, capsys):
    starts, ends, left_over = load_example("sandwich").main()
    np.testing.assert_array_equal(starts, [0, 3, 8, 10, 17, 45, 49, 52, 52, 60])
    np.testing.assert_array_equal(ends, [3, 8, 10, 17, 45, 49, 52, 52, 60, 61])
    assert left_over == 39
    assert "left over: 39 inches" in capsys.readouterr().out


def test_running_max(gpu, capsys):
    result = load_example("running_max").main(n=5000, seed=3)
    assert result.dtype == np.float32 and result.shape == (5000,)
    assert "OK" in capsys.readouterr().out


def test_custom_operator(gpu, capsys):
    result = load_example("custom_operator").main(n=70_000, seed=4)
    assert result.shape == (70_000,)
    out = capsys.readouterr().out
    assert "OK" in out and "magnitude(b) >= magnitude(a)" in out


def test_compaction(gpu, rng, capsys):
    example = load_example("compaction")
    for n in (0, 1, 4095, 4096, 4097, 1_000_003):
        x = rng.standard_normal(n).astype(np.float32)
        from pycuda import gpuarray
        kept = example.compact_above(gpuarray.to_gpu(x), 0.25).get()
        np.testing.assert_array_equal(kept, x[x > 0.25])


@pytest.mark.parametrize("n", [1, 4095, 4097, 300_001])
def test_linear_recurrence(gpu, capsys, n):
    load_example("linear_recurrence").main(n=n, seed=n)
    assert capsys.readouterr().out.count("OK") == 1


def test_train_linear_recurrence(gpu, capsys):
    """The example's own check (its gradients in float64 equal those of torch's loop over
    time, else it raises), then training: the loss falls well below where it started."""
    require_module("torch")
    losses = load_example("train_linear_recurrence").main(steps=150, time=300, seed=1)
    assert "OK: gradients match torch's loop over time" in capsys.readouterr().out
    assert len(losses) == 150 and max(losses[-10:]) < 0.05 * losses[0]


@pytest.mark.parametrize("n", [1000, 4097, 200_003])
def test_particles(gpu, capsys, n):
    sorted_particles = load_example("particles").main(n=n, seed=n)
    assert capsys.readouterr().out.count("OK") == 1
    cells = sorted_particles.get()
    assert cells.size <= n


def test_readme_sorting_section_runs(gpu):
    namespace = run_docs_block("scangen.radix_sort(", "sorting")
    keys, ids = namespace["keys"].get(), np.arange(1_000_000, dtype=np.int32)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(namespace["ordered"].get(), keys[order])
    np.testing.assert_array_equal(namespace["ids_by_key"].get(), ids[order])
    _, rank = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(namespace["order"].get(),
                                  np.lexsort((np.arange(keys.size), -rank.reshape(-1))))
    cells = namespace["cells"].get()
    digit = cells >> 24
    dest = np.empty(cells.size, np.int64)
    dest[np.argsort(digit, kind="stable")] = np.arange(cells.size)
    np.testing.assert_array_equal(namespace["dest"].get(), dest)
    np.testing.assert_array_equal(namespace["counts"].get(),
                                  np.histogram(keys, 100, (-4.0, 4.0))[0])


def test_examples_run_with_their_defaults(gpu, capsys):
    names = ("sandwich", "running_max", "custom_operator", "compaction", "linear_recurrence",
             "particles")
    for name in names:
        load_example(name).main()
    assert capsys.readouterr().out.count("OK") == len(names)


def test_readme_quick_start_runs(gpu, capsys):
    require_module("cupy")  # the quick start scans CuPy arrays
    blocks = docs_python_blocks()
    assert blocks, "the docs have no python block"
    namespace = {}
    exec(compile(blocks[0], "README.md quick start", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "__global__" in printed and "[3 3 5 5 5 2]" in printed
    # The quick start's exclusive add scan of arange(10), a CuPy array.
    assert type(namespace["y"]).__module__.startswith("cupy")
    np.testing.assert_array_equal(namespace["y"].get(), [0, 0, 1, 3, 6, 10, 15, 21, 28, 36])


def test_readme_scan_kernel_section_runs(gpu):
    namespace = run_docs_block("ScanKernel(", "ScanKernel")
    x = namespace["x"].get()
    np.testing.assert_array_equal(namespace["kept"].get(), x[x > 0.5])


@pytest.mark.parametrize("algorithm", ["warp_shuffle", "brent_kung"])
def test_cli_demo(gpu, capsys, algorithm):
    from scangen.cli import main

    code = main(["demo", "--n", "100003", "--algorithm", algorithm])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("OK: matches") == 2
    assert "static __device__ __forceinline__ scan_t combine" in out


def test_the_guides_prepared_scan_runs(gpu):
    require_module("cupy")
    namespace = run_docs_block(".prepare(x)", "prepared scan")
    x, y = namespace["x"].get(), namespace["y"]
    assert y is namespace["step"].out
    np.testing.assert_allclose(y.get(), reference(x, "add"), rtol=1e-4)


def test_readme_primitives_section_runs(gpu):
    namespace = run_docs_block("scangen.select(x, \"x > 0.0f\")", "primitives")
    x, mask = namespace["x"].get(), namespace["mask"].get()
    np.testing.assert_array_equal(namespace["positive"].get(), x[x > 0])
    np.testing.assert_array_equal(namespace["kept"].get(), x[mask])
    np.testing.assert_array_equal(namespace["negative"].get(), x[~(x > 0)])
    assert namespace["n_true"] == (x.size + 1) // 2


def test_readme_more_kinds_of_scan_runs(gpu, capsys):
    namespace = run_docs_block("SegmentedScan(", "'More kinds of scan'")
    x = np.arange(1, 13, dtype=np.uint8)
    np.testing.assert_array_equal(namespace["wide"].get(), np.cumsum(x, dtype=np.int64))
    np.testing.assert_array_equal(namespace["suffix"].get(),
                                  np.cumsum(x[::-1], dtype=np.uint8)[::-1])
    np.testing.assert_array_equal(namespace["carry"].get(), np.cumsum(x, dtype=np.uint8) + 100)
    np.testing.assert_array_equal(namespace["rows"].get(),
                                  np.maximum.accumulate(x.reshape(3, 4), axis=1))
    np.testing.assert_array_equal(namespace["seg"].get(),
                                  [0, 1, 3, 0, 4, 9, 15, 0, 8, 17, 27, 38])
    assert not namespace["report"]
    assert "breaks the operator contract" in capsys.readouterr().out


def _top_level_imports(code):
    """The packages a block imports (``import cupy as cp, dask.array as da``: cupy, dask)."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _check_torch_streams(namespace):
    x = namespace["x"].cpu().numpy()
    np.testing.assert_array_equal(namespace["y"].cpu().numpy(), reference(x, "add"))
    np.testing.assert_array_equal(namespace["kept"].cpu().numpy(), x[x > 4])
    assert namespace["total"] == int(x.sum())


def _check_dask_scans(namespace):
    values = namespace["values"]
    np.testing.assert_array_equal(namespace["y"].compute().get(),
                                  reference(values, "last_nonzero"))
    np.testing.assert_array_equal(namespace["z"].compute().get(),
                                  reference(values, "add", "exclusive"))
    np.testing.assert_array_equal(namespace["kept"].compute().get(), values[values > 0])


def _check_struct_scan(namespace):
    rng = np.random.default_rng(5)
    maps = exact_affine_pairs(rng, 10_001).astype(namespace["pair"])
    from pycuda import gpuarray
    got = namespace["maps"](gpuarray.to_gpu(maps)).get()
    np.testing.assert_array_equal(got, reference(maps, AFFINE_PAIRS))


def _check_prepared_scan(namespace):
    """The prepared scan's last call scanned x's last contents into its own output."""
    step, x, y = namespace["step"], namespace["x"], namespace["y"]
    assert y is step.out
    host = x.get()
    assert_scan_equal(y.get(), reference(host, "add"), np.float32, host.size, op="add")


#: What each docs block computes, checked after it runs, by a text the block contains.
#: Blocks checked by a test above, or by assert statements of their own, are named in
#: CHECKED_ELSEWHERE.
DOCS_CHECKS = {"torch.cuda.Stream()": _check_torch_streams,
                 "scangen.dask.inclusive_scan(x, scangen.LAST_NONZERO)": _check_dask_scans,
                 "scan_t{b.m * a.m, b.m * a.c + b.c}": _check_struct_scan,
                 ".prepare(x)": _check_prepared_scan}
CHECKED_ELSEWHERE = ["scan(x, out=y)", "ScanKernel(", "scangen.radix_sort(", "SegmentedScan(",
                     'scangen.select(x, "x > 0.0f")', "assert "]


@pytest.mark.parametrize("index", range(len(docs_python_blocks())))
def test_every_docs_python_block_runs(gpu, capsys, index, tmp_path, monkeypatch):
    """Each python block of the README and the guide runs as written, and what it computes
    is checked: here, by a test above, or by its own asserts; a block that imports an
    optional library (CuPy, torch, Dask, dask-cuda) needs that library
    (tests.support.require_module)."""
    block = docs_python_blocks()[index]
    imported = _top_level_imports(block)
    for library in ("cupy", "torch", "dask", "dask_cuda", "distributed"):
        if library in imported:
            require_module(library)
    if "gpu_cluster(" in block:  # a dask.distributed cluster, imported by scangen.dask
        require_module("distributed")
    monkeypatch.chdir(tmp_path)  # blocks that write files (a memmap) write them there
    namespace = {}
    exec(compile(block, f"docs python block {index}", "exec"), namespace)
    checks = [check for marker, check in DOCS_CHECKS.items() if marker in block]
    for check in checks:
        check(namespace)
    assert checks or any(marker in block for marker in CHECKED_ELSEWHERE), \
        f"nothing checks what docs python block {index} computes: add to DOCS_CHECKS"
