"""The bench's pieces that need no GPU: size parsing, the struct scan option, and the CUB
peer programs compiling and joining the tables."""
import argparse
import contextlib
import importlib.util
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import scangen

from tests.support import needs_nvcc
from scangen import bench
from scangen.workloads import parse_size
from scangen.strategies.tile_state import TileState


@pytest.mark.parametrize("text,size", [("1048576", 1 << 20), ("2^20", 1 << 20),
                                       ("2**20", 1 << 20), ("1_000", 1000)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["2^", "x", "-4", "1.5"])
def test_bad_sizes(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


PRIMITIVES_SCRIPT = Path(bench.__file__).resolve().parent.parent / "benchmarks" / "primitives.py"


def load_primitives_script():
    spec = importlib.util.spec_from_file_location("primitives_benchmark", PRIMITIVES_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_nvcc
@pytest.mark.parametrize("source", [bench.CUB_SOURCE, bench.CUB_DIR / "cub_primitives.cu"],
                         ids=lambda source: source.name)
def test_a_cub_peer_compiles_without_warnings(tmp_path, source):
    binary = tmp_path / source.stem
    result = subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90", "-o", str(binary),
                             str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""
    usage = subprocess.run([str(binary)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_without_nvcc_the_cub_peer_is_skipped(monkeypatch, capsys):
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    with bench.cub_program(bench.CUB_SOURCE, "sm_90") as binary:
        assert binary is None
    assert "cub: skipped (needs nvcc" in capsys.readouterr().err


def test_cub_rows_join_the_primitive_tables(tmp_path, monkeypatch):
    """primitives.py --cub: the program's JSON lines grouped by (primitive, n), in order,
    from a run with the sizes and trials asked for (a stand-in program here)."""
    fake = tmp_path / "cub_primitives"
    fake.write_text('#!/bin/sh\necho "$CUB_TRIALS $*" > "$0.args"\n'
                    'echo \'{"primitive": "p", "contender": "cub A", "n": 16, "seconds": 1.5}\'\n'
                    'echo \'{"primitive": "p", "contender": "cub B", "n": 16, "seconds": 2}\'\n')
    fake.chmod(0o755)
    primitives = load_primitives_script()

    @contextlib.contextmanager
    def built(source, arch):
        assert source.name == "cub_primitives.cu" and arch == "sm_90"
        yield fake

    class Device:
        def compute_capability(self):
            return 9, 0

    driver = SimpleNamespace(Context=SimpleNamespace(get_device=Device))
    monkeypatch.setattr(primitives, "cub_program", built)
    args = SimpleNamespace(sizes=[16, 32], trials=5)
    assert primitives.cub_timings(args, driver) == {("p", 16): [("cub A", 1.5), ("cub B", 2)]}
    assert (tmp_path / "cub_primitives.args").read_text() == "5 16 32\n"
    rows = [("copy", 1), ("scangen.A", 2), ("scangen.B", 3), ("torch.a", 4)]
    assert primitives.after_scangen(rows, [("cub A", 5)]) == [
        ("copy", 1), ("scangen.A", 2), ("scangen.B", 3), ("cub A", 5), ("torch.a", 4)]


def bench_arguments(*argv):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_16_byte_struct_scan_is_an_option():
    args = bench_arguments("--struct", "affine-f64x2", "--dtypes", "--sizes", "2^26",
                           "--strategies", "auto", "decoupled_lookback")
    assert args.structs == ["affine-f64x2"] and args.dtypes == [] and args.sizes == [1 << 26]
    work, = bench.workloads(args)
    assert work.dtype.itemsize == 16 and work.dtype.names == ("m", "c")
    assert work.label == "struct16" and work.op_name == "affine-f64x2"
    # the contenders: a copy of the same bytes, and a scangen scan per strategy; no peer
    # (torch and cupy have no struct scan)
    entries = bench.contenders(args, work.dtype, work.op_name, work.operator, driver=None)
    assert [name for name, _, _ in entries] == ["copy", "scangen/auto",
                                                "scangen/decoupled_lookback"]
    assert all(check is work.operator for _, _, check in entries[1:])
    # what a scangen contender runs at 2^26: one single-pass launch that moves the two
    # n x 16 bytes, with the split (two-word) tile status of 16-byte values
    scan = scangen.Scan(work.dtype, work.operator, strategy="decoupled_lookback")
    plan = scan.plan(1 << 26)
    assert [launch.kernel.name for launch in plan.launches] == ["scan_tiles_user"]
    assert TileState(scan.spec.acc_itemsize).packed is False
    assert scan.spec.acc_itemsize == 16


def test_the_struct_input_and_check_follow_the_operator(rng):
    args = bench_arguments("--struct", "affine-f64x2", "--dtypes", "int32")
    scalar, work = bench.workloads(args)
    assert scalar.dtype == np.int32 and scalar.op_name == "add"
    x = work.make_input(rng, 1000)
    assert x.dtype == work.dtype and np.ptp(x["c"]) > 1 and np.all(np.abs(x["m"] - 1) < 1e-3)
    want = scangen.reference_scan(x, work.operator)
    # the same recurrence, one step at a time: x[t] = m[t] x[t-1] + c[t]
    state, loop = 0.0, []
    for m, c in zip(x["m"], x["c"]):
        state = m * state + c
        loop.append(state)
    np.testing.assert_allclose(want["c"], loop, rtol=1e-12, atol=1e-12)
    bench.check_result(want.copy(), want, work.dtype)
    wrong = want.copy()
    wrong["c"][500] += 1.0
    with pytest.raises(AssertionError):
        bench.check_result(wrong, want, work.dtype)


def test_an_unknown_struct_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        bench_arguments("--struct", "affine-f32x2")
    assert "invalid choice: 'affine-f32x2'" in capsys.readouterr().err


def test_the_affine_maps_operator_scans_uint64_maps(rng):
    """--ops affine_then: packed uint64 maps x -> m x + c (mod 2^32) with odd m, composed in
    order; the CUB peer knows it; other dtypes are refused."""
    args = bench_arguments("--dtypes", "uint64", "--ops", "affine_then", "last_nonzero")
    maps, last = bench.workloads(args)
    assert maps.operator is scangen.ops.AFFINE_THEN and last.operator is scangen.LAST_NONZERO
    x = maps.make_input(rng, 1000)
    assert x.dtype == np.uint64 and np.all((x >> np.uint64(32)) & np.uint64(1) == 1)
    want = scangen.reference_scan(x, maps.operator)
    point, mask = np.uint64(12345), np.uint64(0xFFFFFFFF)
    state = point
    for k in range(1000):  # applying the maps one by one equals applying each prefix
        m, c = x[k] >> np.uint64(32), x[k] & mask
        state = (m * state + c) & mask
        assert ((want[k] >> np.uint64(32)) * point + (want[k] & mask)) & mask == state
    assert "affine_then" in bench.CUB_OPS and "uint64" in bench.CUB_DTYPES
    with pytest.raises(SystemExit, match="give --dtypes uint64"):
        bench.workloads(bench_arguments("--dtypes", "uint32", "--ops", "affine_then"))
