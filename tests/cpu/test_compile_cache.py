"""scangen's cubin cache (scangen.compile._cubin, scangen.cache): a module is compiled once
per source, architecture and nvcc, later lookups read the file without running nvcc (no
preprocessor either), and files appear whole. PyCUDA's compiler is faked: it records what
it compiles."""
import sys
import types

import numpy as np
import pytest

import scangen
from scangen import compile as compile_module_
from scangen.cache import cache_dir, write_atomically


@pytest.fixture
def nvcc(monkeypatch, tmp_path):
    """A fake pycuda.compiler whose compile returns the source's length as the cubin."""
    calls = []
    compiler = types.ModuleType("pycuda.compiler")
    compiler.DEFAULT_NVCC_FLAGS = ["-O3"]
    compiler.get_nvcc_version = lambda nvcc: "nvcc fake 13.0"

    def compile(source, arch=None, no_extern_c=False, cache_dir=None):
        calls.append((arch, no_extern_c, cache_dir))
        return f"cubin of {len(source)} for {arch}".encode()
    compiler.compile = compile
    driver = types.ModuleType("pycuda.driver")
    driver.CompileError = type("CompileError", (Exception,), {})
    package = types.ModuleType("pycuda")
    package.compiler, package.driver = compiler, driver
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.compiler", compiler)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path))
    return calls


def _module(dtype=np.float32):
    return scangen.Scan(dtype, "add").kernel.scan_module


def test_a_module_compiles_once_then_comes_from_the_cache(nvcc):
    module = _module(np.float16)  # a module with an #include
    assert "#include" in module.module_source().text
    first = compile_module_._cubin(module, "sm_90")
    again = compile_module_._cubin(module, "sm_90")
    assert first == again == f"cubin of {len(module.module_source().text)} for sm_90".encode()
    assert nvcc == [("sm_90", True, False)]  # PyCUDA's own cache (and its preprocessing) off
    assert [p.suffix for p in cache_dir("cubin").iterdir()] == [".cubin"]  # no partial file


def test_the_key_holds_the_architecture_the_source_and_nvcc(nvcc, monkeypatch):
    compile_module_._cubin(_module(), "sm_90")
    compile_module_._cubin(_module(), "sm_80")
    compile_module_._cubin(_module(np.int32), "sm_90")
    monkeypatch.setattr(sys.modules["pycuda.compiler"], "get_nvcc_version",
                        lambda nvcc: "nvcc fake 13.1")
    compile_module_._cubin(_module(), "sm_90")
    assert len(nvcc) == 4
    assert len(list(cache_dir("cubin").iterdir())) == 4


def test_an_unwritable_cache_still_compiles(nvcc, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(blocker))
    for _ in range(2):
        assert compile_module_._cubin(_module(), "sm_90").startswith(b"cubin of")
    assert len(nvcc) == 2


def test_a_failed_write_leaves_neither_file_nor_partial(tmp_path, monkeypatch):
    target = tmp_path / "cubin" / "x.cubin"

    def refuse(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr("os.replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, b"data")
    assert list(target.parent.iterdir()) == []


def test_the_cache_folder_follows_scangen_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path))
    assert cache_dir("cubin") == tmp_path / "cubin"
    monkeypatch.delenv("SCANGEN_CACHE_DIR")
    assert cache_dir("tuning").name == "tuning" and "scangen" in str(cache_dir("tuning"))
