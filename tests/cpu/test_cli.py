"""The command line: source and plan need no GPU; bad requests exit 2 with the library's words."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scangen
from scangen import bench, cli
from scangen.cli import PRIMITIVES, main

from tests.support import marked_source_line, require_nvcc

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_source_matches_the_library(capsys):
    code, out, err = run(capsys, "source", "--dtype", "int32", "--op", "add", "--mode",
                         "exclusive", "--algorithm", "brent_kung", "--section-size", "512")
    assert code == 0, err
    expected = scangen.Scan(np.int32, "add", mode="exclusive", algorithm="brent_kung",
                            section_size=512).source
    assert out == expected
    assert "__global__" in out


def test_source_defaults_are_the_scan_defaults(capsys):
    code, out, _ = run(capsys, "source")
    assert code == 0
    assert out == scangen.Scan(np.float32).source


@pytest.mark.parametrize("algorithm", list(scangen.ALGORITHMS))
def test_source_every_algorithm(capsys, algorithm):
    code, out, err = run(capsys, "source", "--algorithm", algorithm, "--dtype", "float64")
    assert code == 0, err
    assert f"algorithm {algorithm}" in out


def test_source_user_operator(capsys):
    code, out, err = run(capsys, "source", "--dtype", "int16", "--expr",
                         "pick(a, b)", "--identity", "0", "--name", "last_nonzero",
                         "--preamble", "__device__ scan_t pick(scan_t a, scan_t b) "
                         "{ return b != 0 ? b : a; }")
    assert code == 0, err
    op = scangen.Operator("pick(a, b)", 0, name="last_nonzero",
                          preamble="__device__ scan_t pick(scan_t a, scan_t b) "
                          "{ return b != 0 ? b : a; }")
    assert out == scangen.Scan(np.int16, op).source
    assert "pick(a, b)" in out and "last_nonzero" in out


@pytest.mark.parametrize("text, literal", [
    ("-inf", "__int_as_float(0xFF800000)"),   # "--identity -inf" must not read as an option
    ("inf", "__int_as_float(0x7F800000)"),
    ("lowest", "__int_as_float(0xFF800000)"),
    ("-2.5", "-2.5f"),
])
def test_identity_spellings(capsys, text, literal):
    code, out, err = run(capsys, "source", "--dtype", "float32", "--expr", "a < b ? b : a",
                         "--identity", text)
    assert code == 0, err
    assert f"return {literal};" in out


@pytest.mark.parametrize("dtype", ["int8", "uint32", "float64", "float16"])
@pytest.mark.parametrize("text", ["highest", "lowest", "HIGHEST", "-inf", "0x7f", "0"])
def test_the_cli_reads_an_identity_as_operator_does(capsys, dtype, text):
    """--identity TEXT and Operator(..., identity="TEXT") are one operator: same source."""
    try:
        library = scangen.Scan(dtype, scangen.Operator("a < b ? a : b", text)).source
    except ValueError as err:  # e.g. -inf for an integer type: the CLI says the same
        code, _, cli_err = run(capsys, "source", "--dtype", dtype, "--expr", "a < b ? a : b",
                               "--identity", text)
        assert code == 2 and str(err) in cli_err
        return
    code, out, err = run(capsys, "source", "--dtype", dtype, "--expr", "a < b ? a : b",
                         "--identity", text)
    assert code == 0, err
    assert out == library


def test_integer_identity_forms(capsys):
    code, out, err = run(capsys, "source", "--dtype", "uint8", "--expr", "(a & b)",
                         "--identity", "0xff")
    assert code == 0, err
    assert "((unsigned char)255)" in out


def test_plan_matches_the_library(capsys):
    code, out, err = run(capsys, "plan", "--n", "1000000", "--algorithm", "coarsened",
                         "--items-per-thread", "8", "--dtype", "int64")
    assert code == 0, err
    expected = scangen.Scan(np.int64, algorithm="coarsened", items_per_thread=8).plan(1_000_000)
    assert out.strip() == expected.describe()


def test_plan_hierarchical(capsys):
    code, out, err = run(capsys, "plan", "--n", "5000", "--strategy", "hierarchical",
                         "--section-size", "1024", "--algorithm", "kogge_stone")
    assert code == 0, err
    expected = scangen.Scan(np.float32, algorithm="kogge_stone", section_size=1024,
                            strategy="hierarchical").plan(5000)
    assert out.strip() == expected.describe()
    assert "add_prefixes" in out


@pytest.mark.parametrize("text", ["2^20", "2**20", "1048576", "1_048_576"])
def test_plan_takes_the_bench_size_syntax(capsys, text):
    code, out, _ = run(capsys, "plan", "--n", text, "--section-size", "2^10")
    spec = scangen.Scan(np.float32, section_size=1024).spec  # the tuned block for the section
    assert code == 0 and "n=1048576 " in out and \
        f"section 1024 = {spec.block_size} threads x {spec.items_per_thread}" in out


def test_source_check_compiles_or_points_at_the_operator(capsys):
    require_nvcc()
    code, out, err = run(capsys, "source", "--check", "--dtype", "int32")
    assert code == 0 and "compiled this module without errors" in err
    code, out, err = run(capsys, "source", "--check", "--expr", "a +* b", "--identity", "0")
    assert code == 1 and "in your operator" in err and marked_source_line(err) == "a +* b"


def test_plan_of_zero_elements(capsys):
    code, out, _ = run(capsys, "plan", "--n", "0")
    assert code == 0
    assert "0 launch(es)" in out


@pytest.mark.parametrize("argv, message", [
    (["source", "--op", "plus"], "unknown operator 'plus'"),
    (["source", "--section-size", "1000"], "power of two"),
    (["source", "--section-size", "4096", "--algorithm", "kogge_stone"], "the limit is 1024"),
    (["source", "--items-per-thread", "4", "--algorithm", "kogge_stone"], "coarsened"),
    (["source", "--dtype", "uint8", "--expr", "a + b", "--identity", "300"], "does not fit uint8"),
    (["source", "--dtype", "int32", "--expr", "a + b", "--identity", "-inf"], "does not fit int32"),
    (["source", "--dtype", "float32", "--op", "bit_xor"], "needs an integer dtype"),
    (["source", "--dtype", "bool"], "unsupported dtype bool"),
    (["source", "--expr", "a + b"], "--expr needs --identity"),
    (["source", "--identity", "0"], "needs --expr"),
    (["source", "--op", "add", "--expr", "a + b", "--identity", "0"], "not both"),
    (["source", "--expr", " ", "--identity", "0"], "expression is empty"),
    (["source", "--expr", "a + b", "--identity", "0", "--name", "my op"], "C identifier"),
    (["source", "--dtype", "int32", "--expr", "a + b", "--identity", "1.5"], "not an integer"),
])
def test_validation_errors_exit_2_with_the_library_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["source", "--algorithm", "fastest"], "invalid choice"),
    (["source", "--mode", "both"], "invalid choice"),
    (["source", "--identity", "zero", "--expr", "a"], "not a number"),
    (["plan"], "--n"),
    (["plan", "--n", "many"], "not a size: 'many'"),
    (["plan", "--n", "-5"], "a size cannot be negative"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_usage_errors_exit_2(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "error:" in err and message in err


def test_help_lists_commands(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("source", "plan", "demo", "bench"):
        assert command in out


def test_bench_help(capsys):
    code, out, _ = run(capsys, "bench", "--help")
    assert code == 0
    assert "--sizes" in out and "--strategies" in out


@pytest.mark.parametrize("command", ["source", "plan", "demo"])
def test_subcommand_help_lists_algorithms_with_summaries(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    for name, algorithm in scangen.ALGORITHMS.items():
        assert name in out
    if command != "demo":
        for name, algorithm in scangen.ALGORITHMS.items():
            assert algorithm.summary in " ".join(out.split())
        for option in ("--dtype", "--op", "--expr", "--identity", "--preamble", "--mode",
                       "--section-size", "--items-per-thread", "--strategy"):
            assert option in out
        for op in scangen.BUILTIN_OPERATORS:
            assert op in out


@pytest.mark.parametrize("algorithm", ["warp_shuffle", "brent_kung", "kogge_stone"])
def test_the_demo_shows_the_modules_summary_and_its_operator(algorithm):
    source = scangen.Scan(np.int32, scangen.LAST_NONZERO, algorithm=algorithm).source
    shown = cli._summary_and_operator(source, 6).splitlines()
    assert shown[0].startswith("// scangen: inclusive scan")
    assert f"// algorithm {algorithm}" in shown[1]
    operator = shown.index("...") + 1
    assert shown[operator].startswith("// The operator")
    assert "static __device__ __forceinline__ scan_t combine(scan_t a, scan_t b)" in \
        shown[operator:]
    assert len(shown) == operator + 6


def test_demo_without_a_gpu_is_one_clear_line(capsys, monkeypatch):
    def no_gpu():
        raise scangen.GPUUnavailableError("running a scan needs PyCUDA (simulated: no GPU)")

    # Simulated, so this runs on GPU machines too (where tests/gpu runs the real demo).
    monkeypatch.setattr(cli, "current_context", no_gpu)
    code, out, err = run(capsys, "demo", "--n", "10")
    assert code == 2
    assert err == "error: running a scan needs PyCUDA (simulated: no GPU)\n"
    assert "Traceback" not in err


def test_bench_without_a_gpu_is_one_clear_line(capsys, monkeypatch):
    def no_pycuda():
        raise scangen.GPUUnavailableError("running a scan needs PyCUDA (simulated)")

    monkeypatch.setattr(bench, "require_pycuda", no_pycuda)
    code, out, err = run(capsys, "bench", "--sizes", "1024", "--no-peers")
    assert code == 2
    assert err == "error: running a scan needs PyCUDA (simulated)\n"


def test_python_dash_m_scangen():
    """The module entry point, as a newcomer types it, from outside the repository."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "scangen", "plan", "--n", "2049", "--section-size", "1024"],
        capture_output=True, text=True, env=env, cwd=ROOT.parent, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "plan: inclusive scan with add over n=2049 float32" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "scangen", "source", "--op", "nope"],
                         capture_output=True, text=True, env=env, cwd=ROOT.parent, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: unknown operator 'nope'")


@pytest.mark.parametrize("script,option", [("tune_single_pass.py", "--sizes"),
                                           ("tune_single_pass.py", "--first-wait"),
                                           ("tune_single_pass.py", "--shapes"),
                                           ("per_call_overhead.py", "--calls"),
                                           ("vector_runs.py", "--exclusive-at"),
                                           ("vector_runs.py", "--queued"),
                                           ("first_call.py", "--runs"),
                                           ("single_call.py", "--log2n"),
                                           ("primitives.py", "--cub"),
                                           ("dask_scan.py", "--breakdown"),
                                           ("dask_scan.py", "--sort"),
                                           ("dask_scan.py", "--partitions"),
                                           ("dask_scan.py", "--dask-config"),
                                           ("out_of_core.py", "--budget-gib"),
                                           ("out_of_core.py", "--pin-threads"),
                                           ("tune_radix.py", "--argsort"),
                                           ("tune_counting.py", "--predicate"),
                                           ("compaction_before_after.py", "--baseline"),
                                           ("compaction_before_after.py", "--sizes"),
                                           ("recurrence_before_after.py", "--shapes"),
                                           ("torch_before_after.py", "--shapes"),
                                           ("host_path.py", "--baseline")])
def test_benchmark_script_help_needs_no_gpu(script, option):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script),
                             "--help"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert option in result.stdout


def test_the_host_path_model_runs_without_a_gpu():
    """benchmarks/host_path.py times the host's share of a call with the driver faked: it
    must keep running as the host path changes (its numbers are read, not asserted)."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_path.py"),
                             "--calls", "200", "--primitives", "--axis"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("us per call") == 13


def test_the_host_path_model_times_torch_calls_in_two_checkouts():
    """--torch adds scangen.torch's eager calls (CPU tensors passing for CUDA ones), and
    --baseline times another checkout in turn (here this one), each line led by its side."""
    pytest.importorskip("torch")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_path.py"),
                             "--calls", "20", "--torch", "--baseline", str(ROOT), "--rounds",
                             "1"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "us per call" in line]
    assert [line.split()[0] for line in lines] == ["baseline"] * 7 + ["new"] * 7
    assert sum("its gradient" in line for line in lines) == 4


@pytest.mark.parametrize("what,predicate", [("select", "x > 0.5f"), ("remove_if", "x > 0.5f"),
                                            ("partition", "i % 2 == 0"), ("unique", None),
                                            ("run_length_encode", None)])
def test_source_of_a_primitive(capsys, what, predicate):
    argv = ["source", what, "--dtype", "float32"] + (["--predicate", predicate] if predicate else [])
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert f"// scangen: {what};" in out
    if predicate:
        assert predicate in out


@pytest.mark.parametrize("name", list(PRIMITIVES))
def test_every_primitive_prints_its_source_and_plan(capsys, name):
    """Each primitive a module declares (scangen.primitives.registry) is on the command
    line, with the options it needs; its source is its object's."""
    needs = [f"--{option}=x > 0" for option in PRIMITIVES[name].needs]
    code, out, err = run(capsys, "source", name, "--dtype", "int32", *needs)
    assert code == 0, err
    built = PRIMITIVES[name].build(np.dtype(np.int32), {},
                                   **{o: "x > 0" for o in PRIMITIVES[name].needs})
    assert out == built.source
    code, out, err = run(capsys, "plan", "--n", "5000", name, "--dtype", "int32", *needs)
    assert code == 0, err
    assert "n=5000" in out


@pytest.mark.parametrize("argv,message", [
    (["source", "select"], "select needs --predicate"),
    (["source", "unique", "--predicate", "x > 0"],
     "--predicate belongs to select, remove_if and partition, not unique"),
    (["source", "histogram", "--section-size", "512"], "histogram takes no --section-size"),
    (["plan", "--n", "10", "unique", "--bins", "4"], "--bins belongs to histogram, not unique"),
    (["plan", "--n", "10", "--bins", "4"], "--bins belongs to histogram, not scan"),
    (["source", "--predicate", "x > 0"], "--predicate belongs to select"),
    (["source", "select", "--predicate", "x > 0; y"], "predicate must be a single C expression"),
    (["source", "--bits", "4"], "--bits belongs to radix_digit_offsets"),
    (["source", "unique", "--bits", "4"], "--bits belongs to radix_digit_offsets, not unique"),
    (["source", "radix_digit_offsets", "--bits", "17"], "1..16 bits"),
])
def test_primitive_source_errors(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


@pytest.mark.parametrize("bits,wide", [(None, False), (3, False), (8, False), (9, True),
                                       (16, True)])
def test_source_of_digit_offsets_by_width(capsys, bits, wide):
    """Digits up to 8 bits are one pass; wider ones add the places module."""
    argv = ["source", "radix_digit_offsets", "--dtype", "int32"]
    code, out, err = run(capsys, *argv, *(["--bits", str(bits)] if bits else []))
    assert code == 0, err
    assert ("radix_places_from_order(" in out) == wide
    assert f"digits of {min(bits or 8, 8)} bits" in out


def test_info_says_what_scangen_sees(capsys, monkeypatch, tmp_path):
    """``info`` without a GPU: versions, nvcc, the GPU and how its name was found, the
    tuning table in effect and the cache's contents, one row each."""
    from scangen import devices, info

    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path))
    (tmp_path / "cubin").mkdir()
    (tmp_path / "cubin" / "a.cubin").write_bytes(bytes(3 << 19))
    (tmp_path / "cubin" / "b.cubin").write_bytes(bytes(1 << 19))
    monkeypatch.setattr(devices, "listed_model", lambda ordinal=0: "NVIDIA H200")
    code, out, err = run(capsys, "info")
    assert code == 0, err
    rows = {line[:21].strip(): line[22:] for line in out.splitlines()}
    assert rows["scangen"].startswith(scangen.__version__)
    assert rows["numpy"] == np.__version__
    assert rows["GPU 0"] == "NVIDIA H200 (from the driver's listing of GPUs; CUDA not " \
        "initialised)"
    assert rows["cache"] == f"{tmp_path} (compiled modules: 2, 2.0 MiB; tuning tables of " \
        "your own: 0)"
    assert rows["tuning table"] == scangen.tuning.active_scan_table()[1]
    for module in info.OPTIONAL:
        assert rows[module] == (info.package_version(module) or "not installed")

    monkeypatch.setattr(devices, "listed_model", lambda ordinal=0: None)
    monkeypatch.setattr(devices, "name_from_driver", lambda ordinal: None)
    monkeypatch.setattr(info.shutil, "which", lambda name: None)
    assert dict(info.report())["GPU 0"].startswith("none seen")
    assert dict(info.report())["nvcc"].startswith("not on PATH")
    monkeypatch.setattr(devices, "name_from_driver", lambda ordinal: "NVIDIA A100")
    assert dict(info.report())["GPU 0"] == "NVIDIA A100 (from the CUDA driver)"
