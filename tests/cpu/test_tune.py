"""``python -m scangen tune`` without a GPU: the candidates of the grid, the sweep in turns
across sizes within a time budget (a fake clock and fake timings), the rule that keeps the
table's values unless a candidate beats them by MIN_GAIN, and the table written and read
back; the command itself with the device and the timings faked."""
import json
import types

from scangen import cli, tune, tuning
from scangen.runtime.gpu import GPUUnavailableError
from scangen.tune import Candidate, Measured


def test_candidates_start_with_the_table_and_are_valid_scans():
    for size in tune.DTYPES:
        found = tune.candidates(size, tuning.SCAN)
        assert found[0] == tune.in_effect(tuning.SCAN, size)
        assert len(set(found)) == len(found) > 1
        for candidate in found:
            spec = candidate.scan(tune.DTYPES[size]).spec
            assert (spec.block_size, spec.items_per_thread) == \
                (candidate.block_size, candidate.items_per_thread)
            assert spec.tuning.at(size).tile_min_threads_per_sm == \
                candidate.tile_min_threads_per_sm
            moves_words = candidate.scan(tune.DTYPES[size]).kernel.scan_module.vector_runs
            assert (moves_words is not None) == candidate.vector_runs


def test_vector_runs_are_candidates_where_a_run_fills_whole_words():
    """A run of items x itemsize bytes that is not whole 16-byte words moves warp by warp
    whatever tile_vector_runs says (so do sections in dynamic shared memory): no candidate
    of its own. The table's 1-byte values move in words."""
    assert tune.in_effect(tuning.SCAN, 1).vector_runs
    assert not tune.in_effect(tuning.SCAN, 4).vector_runs
    for size, words in [(1, {16, 32}), (2, {8, 16, 32}), (4, {4, 8, 16, 32})]:
        found = tune.candidates(size, tuning.SCAN, blocks=(128,), bounds=(1024,))
        assert {c.items_per_thread for c in found if c.vector_runs} == words
        assert {c.items_per_thread for c in found if not c.vector_runs} == set(tune.ITEMS)
    only_warps = tune.candidates(4, tuning.SCAN, vector_runs=(False,))
    assert not any(c.vector_runs for c in only_warps)


def test_tiles_past_the_shared_memory_are_left_out():
    """1024 threads x 32 float64 items: 256 KiB a section, more than a block may have."""
    found = tune.candidates(8, tuning.SCAN, blocks=(1024,), items=(32, 8), bounds=(1024,))
    assert Candidate(1024, 32, 1024) not in found and Candidate(1024, 8, 1024) in found


class Clock:
    """Time that moves only when a test moves it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_sweep_takes_turns_across_sizes_and_keeps_to_the_budget():
    grid = {1: [Candidate(128, 32, 1024), Candidate(256, 16, 1024), Candidate(512, 8, 1024)],
            4: [Candidate(128, 32, 1024), Candidate(256, 8, 2048)]}
    clock, seen = Clock(), []

    def measure(size, candidate):
        seen.append((size, candidate))
        clock.now += 1.0
        return 1e-3 * candidate.items_per_thread

    progress = []
    results = tune.sweep(grid, measure, budget_s=2.5, clock=clock,
                         progress=lambda done, total, text: progress.append((done, total)))
    # the table's values of each size first, then turns, until 2.5 s have passed
    assert seen == [(1, grid[1][0]), (4, grid[4][0]), (1, grid[1][1])]
    assert [r.seconds for r in results] == [0.032, 0.032, 0.016]
    assert progress[-1] == (3, 5)
    # a budget spent already still measures the table's values of every size
    clock.now, seen[:] = 0.0, []
    tune.sweep(grid, measure, budget_s=0, clock=clock)
    assert seen == [(1, grid[1][0]), (4, grid[4][0])]


def test_a_candidate_replaces_the_table_only_by_min_gain_side_by_side():
    table = tuning.SCAN
    current = tune.in_effect(table, 4)
    slightly, clearly = Candidate(256, 16, 1024), Candidate(512, 8, 1536)
    for faster, chosen in [(1 - tune.MIN_GAIN / 2, current), (1 - 2 * tune.MIN_GAIN, clearly)]:
        times = {current: 100e-6, slightly: 100e-6 * 0.999, clearly: 100e-6 * faster}
        results = [Measured(4, c, t) for c, t in times.items()] + [Measured(8, clearly, 1e-9)]
        seen = []

        def measure(size, candidate):
            seen.append((size, candidate))
            return times[candidate]
        baseline, best = tune.choose(results, 4, table, measure, rounds=3)
        assert baseline.candidate == current and best.candidate == chosen
        assert seen == [(4, current), (4, clearly)] * 3  # alternating, the sweep's fastest


def test_a_baseline_timed_slow_in_the_sweep_is_timed_again_before_it_loses():
    """The sweep measured the table's values at a bad moment (a GPU still at idle clocks):
    side by side they are as fast as the sweep's winner, so the table keeps them."""
    current, other = tune.in_effect(tuning.SCAN, 2), Candidate(512, 8, 2048)
    results = [Measured(2, current, 150e-6), Measured(2, other, 130e-6)]
    times = iter([130e-6, 131e-6, 129e-6, 130e-6, 131e-6, 129e-6])
    baseline, best = tune.choose(results, 2, tuning.SCAN, lambda size, c: next(times), rounds=3)
    assert best == baseline and baseline.candidate == current
    assert baseline.seconds == 130e-6  # the side-by-side median, not the sweep's time
    # where the table's values were the sweep's fastest, nothing is timed again
    results = [Measured(2, current, 120e-6), Measured(2, other, 130e-6)]
    assert tune.choose(results, 2, tuning.SCAN, None) == (results[0], results[0])


def test_the_warm_up_measures_the_tables_values_for_its_time():
    grid = {1: [Candidate(128, 32, 1024), Candidate(256, 16, 1024)],
            4: [Candidate(128, 32, 1024)]}
    clock, seen = Clock(), []

    def measure(size, candidate):
        seen.append((size, candidate))
        clock.now += 0.3
    tune.warm_up(grid, measure, seconds=1.0, clock=clock)
    assert seen == [(1, grid[1][0]), (4, grid[4][0])] * 2


def test_the_tuned_table_changes_only_the_tuned_fields_of_the_tuned_sizes(tmp_path):
    chosen = {4: Candidate(512, 8, 1536, vector_runs=True), 1: Candidate(256, 16, 2048)}
    table = tune.tuned_table(tuning.SCAN, chosen)
    assert tune.in_effect(table, 4) == chosen[4] and tune.in_effect(table, 1) == chosen[1]
    for size in (2, 8, 16):
        assert tune.in_effect(table, size) == tune.in_effect(tuning.SCAN, size)
    assert table.value("tile_vector_runs", 4) is True
    assert table.value("tile_vector_runs", 1) is False
    for name in ("tile_persistent_min_bytes", "auto_reduce_then_scan_min_bytes"):
        assert table.value(name, 4) == tuning.SCAN.value(name, 4)
    path = tmp_path / "t.json"
    tuning.write_table(path, table, "NVIDIA Test", "python -m scangen tune")
    assert tuning.load_table(path) == table


def test_the_command_measures_reports_and_writes_the_table(monkeypatch, tmp_path, capsys):
    """``tune`` with the device, its compiler and its timings faked: the report has a row per
    size, and the file it writes is the table the next process on that GPU would load."""
    device = types.SimpleNamespace(name=lambda: "NVIDIA Fake GPU")
    monkeypatch.setattr(tune, "current_context",
                        lambda: types.SimpleNamespace(get_device=lambda: device))
    monkeypatch.setattr(tune, "precompile", lambda modules: None)
    monkeypatch.setattr(tune, "WARM_UP_S", 0.0)
    monkeypatch.setattr(tune.tuning, "_active", (tuning.SCAN, "scangen's defaults"))
    winner = Candidate(256, 16, 1536)

    def gpu_measure(n, trials, warmup):
        assert (n, trials, warmup) == (1 << 20, 5, 2)
        return lambda size, candidate: {winner: 50e-6, tune.COPY: 40e-6}.get(candidate, 80e-6)

    monkeypatch.setattr(tune, "gpu_measure", gpu_measure)
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path))
    assert cli.main(["tune", "--n", "2^20", "--sizes", "4", "8", "--budget", "60"]) == 0
    out = capsys.readouterr().out
    path = tuning.user_table_path("NVIDIA Fake GPU")
    assert f"wrote {path}" in out and "37.5%" in out
    assert "50%" in out and "80%" in out  # the table's values and the winner, of a copy
    data = json.loads(path.read_text())
    assert data["device"] == "NVIDIA Fake GPU"
    assert data["command"] == "python -m scangen tune --n '2^20' --sizes 4 8 --budget 60"
    assert [row["dtype"] for row in data["report"]] == ["float32", "float64"]
    table = tuning.load_table(path)
    assert tune.in_effect(table, 4) == winner and tune.in_effect(table, 8) == winner
    assert tune.in_effect(table, 2) == tune.in_effect(tuning.SCAN, 2)


def test_the_command_without_a_gpu_says_so(monkeypatch, capsys):
    def no_gpu():
        raise GPUUnavailableError("no GPU here")

    monkeypatch.setattr(tune, "current_context", no_gpu)
    assert cli.main(["tune", "--budget", "1"]) == 2
    assert "error: no GPU here" in capsys.readouterr().err

