"""NVRTC as scangen's compiler without a GPU (SCANGEN_COMPILER=nvrtc): the choice of
compiler, modules of every kind of value compiled to cubins where a libnvrtc is found (the
CUDA toolkit's, or the nvidia-cuda-nvrtc wheel's: these tests skip without one), compile
errors described as nvcc's are, and the cubin cache keyed by the compiler. Whether NVRTC's
cubins run as fast as nvcc's is for the GPU (benchmarks/first_call.py --compiler)."""
import numpy as np
import pytest

import scangen
from scangen import compile as compiler
from scangen import nvrtc

from tests.support import AFFINE_PAIR, AFFINE_PAIRS, operator, simulate_device

#: An ELF file's first bytes: a cubin is one.
ELF = b"\x7fELF"


@pytest.fixture
def libnvrtc():
    try:
        return nvrtc.version()
    except nvrtc.NvrtcUnavailable as err:
        pytest.skip(str(err))


def test_the_compiler_is_named_by_the_environment(monkeypatch):
    monkeypatch.delenv("SCANGEN_COMPILER", raising=False)
    assert compiler.compiler() == "nvcc"
    for given, chosen in [("nvrtc", "nvrtc"), (" NVRTC ", "nvrtc"), ("nvcc", "nvcc"),
                          ("", "nvcc")]:
        monkeypatch.setenv("SCANGEN_COMPILER", given)
        assert compiler.compiler() == chosen
    monkeypatch.setenv("SCANGEN_COMPILER", "clang")
    with pytest.raises(ValueError, match="SCANGEN_COMPILER='clang': use one of nvcc, nvrtc"):
        compiler.compiler()


@pytest.mark.parametrize("dtype,op", [(np.float32, "add"), (np.float16, "max"),
                                      (np.complex64, "mul"), (AFFINE_PAIR, AFFINE_PAIRS),
                                      (np.uint64, "affine_then")])
def test_every_kind_of_module_compiles(libnvrtc, monkeypatch, dtype, op):
    """Whole modules (every kernel of the strategy, the columns and rows kernels) of plain,
    16-bit (their header from the toolkit's include folder), complex and struct values, and
    a plan's part, each to a cubin for the H100's architecture."""
    monkeypatch.setenv("SCANGEN_COMPILER", "nvrtc")
    scan = scangen.Scan(dtype, operator(op) if isinstance(op, str) else op)
    modules = [scan.kernel.scan_module, scan.columns_kernel.scan_module]
    simulate_device(monkeypatch)
    modules.append(scan.plan(1 << 20).part)
    for module in modules:
        cubin = compiler._compiled(module.module_source(), "sm_90", module.description)
        assert cubin[:4] == ELF and len(cubin) > 1000


def test_a_compile_error_names_the_user_code(libnvrtc, monkeypatch):
    monkeypatch.setenv("SCANGEN_COMPILER", "nvrtc")
    kernel = scangen.ScanKernel(np.float32, "add", arguments="const float *x, float *out",
                                input_expr="x[i]", output_statement="out[i] = item + nope;")
    source = kernel.scan_module.module_source()
    with pytest.raises(compiler.ScanCompileError) as caught:
        compiler._compiled(source, "sm_90", kernel.scan_module.description)
    message = str(caught.value)
    assert message.startswith("NVRTC could not compile")
    assert "in your output_statement" in message and "nope" in message


def test_the_cubin_cache_is_keyed_by_the_compiler(monkeypatch):
    """A cubin NVRTC made is never taken for nvcc's (or another NVRTC's)."""
    monkeypatch.setenv("SCANGEN_COMPILER", "nvrtc")
    source = scangen.Scan(np.float32).kernel.scan_module.module_source()
    monkeypatch.setattr(nvrtc, "version", lambda: "nvrtc 13.0")
    first = compiler._cubin_path(source, "sm_90")
    monkeypatch.setattr(nvrtc, "version", lambda: "nvrtc 13.1")
    assert compiler._cubin_path(source, "sm_90") != first
    assert compiler._cubin_path(source, "sm_100") != compiler._cubin_path(source, "sm_90")
