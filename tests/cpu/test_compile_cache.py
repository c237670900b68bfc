"""scangen's cubin cache (scangen.compile._cubin, scangen.cache): a module is compiled once
per source, architecture and nvcc, later lookups read the file without running nvcc (no
preprocessor either), and files appear whole; precompile compiles whole modules, and a
call's part loads its whole module where that is compiled. PyCUDA's compiler and driver
are faked: they record what they compile and load."""
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
    driver.module_from_buffer = lambda cubin: types.SimpleNamespace(
        cubin=cubin, get_function=lambda name: types.SimpleNamespace(
            prepare=lambda arg_format: None, set_attribute=lambda attribute, value: None))
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


@pytest.fixture
def context(monkeypatch):
    """One fake context of an sm_90 device; compile_module's in-memory cache emptied."""
    monkeypatch.setattr(compile_module_, "current_context", lambda: "context")
    monkeypatch.setattr(compile_module_, "context_key", lambda context: 1)
    monkeypatch.setattr(compile_module_, "_arch", lambda context: "sm_90")
    monkeypatch.setattr(compile_module_, "_cache", {})


def test_precompile_compiles_whole_modules_and_calls_load_them(nvcc, context):
    scan = scangen.Scan(np.float32, "add")
    whole = scan.kernel.scan_module
    small, large = scan.plan(1000).part, scan.plan(1 << 26).part
    assert small != large and small.scan_module == large.scan_module == whole
    compile_module_.precompile([whole, whole])
    assert len(nvcc) == 1
    loaded = compile_module_.compile_module(small)
    assert compile_module_.compile_module(large) is loaded  # one load of the whole module
    assert loaded.module.cubin == compile_module_._cubin(whole, "sm_90")
    assert set(loaded.functions) == {name for name, _ in whole.entry_points()}
    assert len(nvcc) == 1  # no part compiled


def test_without_precompile_a_call_compiles_only_its_part(nvcc, context):
    scan = scangen.Scan(np.float32, "add")
    part = scan.plan(1000).part
    loaded = compile_module_.compile_module(part)
    assert set(loaded.functions) == {name for name, _ in part.entry_points()}
    assert len(nvcc) == 1
    assert loaded.module.cubin == f"cubin of {len(part.module_source().text)} for sm_90".encode()
