"""The bench's pieces that need no GPU: size parsing, the struct scan option, the CUB peer
programs compiling and joining the tables, the primitives' JSON rows, and the axis bench's
cases and checks."""
import argparse
import contextlib
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import scangen

from tests.support import needs_nvcc
from scangen import axis_bench, bench, cli, primitive_bench
from scangen.workloads import parse_size, parse_tile
from scangen.strategies.tile_state import TileState


@pytest.mark.parametrize("text,size", [("1048576", 1 << 20), ("2^20", 1 << 20),
                                       ("2**20", 1 << 20), ("1_000", 1000)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["2^", "x", "-4", "1.5"])
def test_bad_sizes(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


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
    """bench --primitives --cub: the program's JSON lines grouped by (primitive, n), in
    order, from a run with the sizes and trials asked for (a stand-in program here)."""
    fake = tmp_path / "cub_primitives"
    fake.write_text('#!/bin/sh\necho "$CUB_TRIALS $CUB_QUEUED $*" > "$0.args"\n'
                    'echo \'{"primitive": "p", "contender": "cub A", "n": 16, "seconds": 1.5}\'\n'
                    'echo \'{"primitive": "p", "contender": "cub B", "n": 16, "seconds": 2}\'\n')
    fake.chmod(0o755)
    primitives = primitive_bench

    @contextlib.contextmanager
    def built(source, arch):
        assert source.name == "cub_primitives.cu" and arch == "sm_90"
        yield fake

    class Device:
        def compute_capability(self):
            return 9, 0

    driver = SimpleNamespace(Context=SimpleNamespace(get_device=Device))
    monkeypatch.setattr(primitives, "cub_program", built)
    args = SimpleNamespace(sizes=[16, 32], trials=5, queued=False)
    assert primitives.cub_timings(args, driver) == {("p", 16): [("cub A", 1.5), ("cub B", 2)]}
    assert (tmp_path / "cub_primitives.args").read_text() == "5 0 16 32\n"
    primitives.cub_timings(SimpleNamespace(sizes=[16], trials=3, queued=True), driver)
    assert (tmp_path / "cub_primitives.args").read_text() == "3 1 16\n"  # --queued
    rows = [("copy", 1), ("scangen.A", 2), ("scangen.B", 3), ("torch.a", 4)]
    assert primitives.after_scangen(rows, [("cub A", 5)]) == [
        ("copy", 1), ("scangen.A", 2), ("scangen.B", 3), ("cub A", 5), ("torch.a", 4)]


@pytest.mark.parametrize("queued", [False, True])
def test_a_queued_batch_waits_behind_an_untimed_call(queued):
    """Timer times a batch started on an idle GPU, as a user's call; with ``queued`` one
    untimed call goes ahead of each batch, so the events time the batch's GPU work alone."""
    log, names = [], iter(["start", "stop"])  # the order Timer makes its two events

    class Event:
        def __init__(self):
            self.name = next(names)

        def record(self):
            log.append(self.name)

        def synchronize(self):
            pass

        def time_since(self, start):
            return 2.0  # ms

    driver = SimpleNamespace(Event=Event, Context=SimpleNamespace(synchronize=lambda: None))
    timer = bench.Timer(driver, trials=2, warmup=1, queued=queued)
    seconds = timer.seconds_per_call(lambda: log.append("call"), 1 << 30)  # one a batch
    assert seconds == 2e-3
    ahead = ["call"] if queued else []
    assert log == ["call", *ahead, "start", "call", "stop", *ahead, "start", "call", "stop"]
    assert bench_arguments("--queued").queued and not bench_arguments().queued


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


def test_prepared_calls_are_a_contender_beside_each_strategy(monkeypatch):
    """--prepared: each strategy's scan also as a prepared call, made from the contender's
    arrays (checked, bound once) and run as it is by the timer."""
    args = bench_arguments("--strategies", "auto", "chained", "--prepared", "--no-peers")
    entries = bench.contenders(args, np.dtype(np.float32), "add", "add", driver=None)
    assert [name for name, _, _ in entries] == [
        "copy", "scangen/auto", "scangen/auto/prepared", "scangen/chained",
        "scangen/chained/prepared"]
    prepared = []
    monkeypatch.setattr(scangen.Scan, "prepare", lambda scan, x, out: prepared.append(
        (scan.spec.strategy, x, out)) or "the prepared call")
    _, make, _ = entries[4]
    assert make("x", "y", None) == "the prepared call"
    assert prepared == [("chained", "x", "y")]


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


def test_primitive_rows_name_scangen_and_each_peer_once():
    """The JSON rows of bench --primitives: per primitive and size, scangen's first row and
    each peer's first, in microseconds, and every contender under contenders."""
    timed = [("copy of the same bytes", 1e-4), ("scangen.Select(flags)", 2e-4),
             ("scangen.Select(flags), count on device", 1.5e-4),
             ("cub DeviceSelect::Flagged", 2.5e-4),
             ("torch.masked_select", 4e-4), ("cupy.compress", 8e-4)]
    results = [dict(primitive="select float32, half kept, mask given", n=1 << 20,
                    contender=name, seconds=seconds, device="GPU") for name, seconds in timed]
    results.append(dict(primitive="radix_sort uint32 keys", n=1 << 20,
                        contender="scangen.RadixSort", seconds=1e-3, device="GPU"))
    select, sort = primitive_bench.summary_rows(results)
    assert select["dtype"] == "float32" and select["n"] == 1 << 20
    assert select["scangen_us"] == pytest.approx(200) and select["copy_us"] == pytest.approx(100)
    assert select["cub_us"] == pytest.approx(250) and select["torch_us"] == pytest.approx(400)
    assert select["cupy_us"] == pytest.approx(800) and len(select["contenders"]) == 6
    assert sort["dtype"] == "uint32" and set(sort) == {"primitive", "dtype", "n", "scangen_us",
                                                        "contenders"}
    assert primitive_bench.owner("torch.sort (int64 keys)") == "torch"
    assert primitive_bench.owner("something else") == ""


def test_the_primitive_bench_is_a_bench_option():
    args = bench_arguments("--primitives", "--only", "select", "radix", "--cub")
    assert args.primitives and args.only == ["select", "radix"] and args.sizes is None


def test_the_primitive_plot_draws_each_peer_against_scangen(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [dict(primitive="select float32", dtype="float32", n=1 << 26, scangen_us=200.0,
                 cub_us=199.0, torch_us=466.0, copy_us=100.0, contenders={}),
            dict(primitive="radix_sort uint32 keys", dtype="uint32", n=1 << 20,
                 scangen_us=100.0, contenders={})]
    path = tmp_path / "primitives.png"
    assert primitive_bench.plot(rows, str(path), "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_axis_bench_is_a_bench_option_with_its_cases():
    args = bench_arguments("--axis", "--shapes", "8x4096x1024:1", "4096x8192:0", "5x7",
                           "--recurrence", "--backward", "--tiles", "256x8")
    assert args.axis and args.recurrence and args.backward and args.tiles == ["256x8"]
    assert axis_bench.cases(args) == ["8x4096x1024:1", "4096x8192:0", "5x7"]
    assert [axis_bench.parse_shape(text) for text in axis_bench.cases(args)] == \
        [((8, 4096, 1024), 1), ((4096, 8192), 0), ((5, 7), -1)]
    assert axis_bench.cases(bench_arguments("--axis")) == axis_bench.DEFAULT_SHAPES
    # --model-shapes: every (B, L, D) of models' sequences, along L and along the last axis
    # of (B, D, L)
    models = [axis_bench.parse_shape(text)
              for text in axis_bench.cases(bench_arguments("--axis", "--model-shapes"))]
    grid = {(b, length, d) for b in (1, 8, 16) for length in (1024, 4096, 16384)
            for d in (768, 2048, 5120)}
    assert {shape for shape, axis in models if axis == 1} == grid
    assert {(b, length, d) for (b, d, length), axis in models if axis == 2} == grid
    assert len(models) == 2 * len(grid)
    assert parse_tile("256x16") == (256, 16)


@pytest.mark.parametrize("text", ["8x:1", "0x4:0", "4x4:2", "4x4:-3", "abc", "4x4:one"])
def test_the_axis_bench_refuses_a_bad_case_before_it_starts(text):
    with pytest.raises(ValueError, match="SHAPE:AXIS|every extent"):
        axis_bench.main(bench_arguments("--axis", "--shapes", text))


@pytest.mark.parametrize("argv,message", [
    (["--axis", "--backward"], "give --recurrence too"),
    (["--axis", "--primitives"], "two benches"),
    (["--axis", "--shapes", "4x4:5"], "the axis one of the shape's")])
def test_the_axis_bench_refuses_options_it_cannot_honour(argv, message, capsys):
    assert cli.main(["bench", *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: bench") and message in error
    if argv != ["--axis", "--primitives"]:
        with pytest.raises(ValueError, match=message):
            axis_bench.main(bench_arguments(*argv))


def test_the_axis_bench_says_it_needs_torch(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    with pytest.raises(SystemExit, match="needs torch"):
        axis_bench.main(bench_arguments("--axis"))


def test_the_axis_bench_checks_each_step_of_the_recurrence(rng):
    """The recurrence's check: a sequential loop's h passes along every axis, one step
    moved by 1% of a term fails, and a large array is checked by whole lines."""
    torch = pytest.importorskip("torch")
    for shape, axis in [((3, 50, 4), 1), ((50, 6), 0), ((2, 3, 40), -1)]:
        a = torch.from_numpy(rng.random(shape) * 0.5 + 0.5).float()
        b = torch.from_numpy(rng.random(shape) - 0.5).float()
        state, steps = torch.zeros_like(a.movedim(axis, 0)[0]), []
        for a_t, b_t in zip(a.movedim(axis, 0), b.movedim(axis, 0)):
            state = a_t * state + b_t
            steps.append(state)
        h = torch.stack(steps).movedim(0, axis).contiguous()
        axis_bench._check_recurrence(torch, a, b, h, axis, "loop")
        h.movedim(axis, 0)[int(rng.integers(1, 40))] += 0.02
        with pytest.raises(RuntimeError, match="misses a step"):
            axis_bench._check_recurrence(torch, a, b, h, axis, "moved")
    lines = axis_bench._checked_lines(torch.zeros(4, 30, 5), 1)
    assert lines.shape == (4, 30, 5)  # small enough: all of it
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(axis_bench, "_CHECKED_ELEMENTS", 100)
        assert axis_bench._checked_lines(torch.zeros(4, 30, 5), 1).shape == (1, 30, 1)
        assert axis_bench._checked_lines(torch.zeros(4, 30, 5), -1).shape == (1, 1, 5)
