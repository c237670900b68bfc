"""The test suite's own options (tests/conftest.py), run on a small suite of their own in a
subprocess: --compile-only sets tests up (so module fixtures, where GPU files precompile
their kernels, run) without running any, and --shard K/N takes slices that cover the suite
once, each of a few runs of neighbouring tests."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import RUNS_PER_SHARD, _runs_of_shard

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

SUITE = """
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def _compile(tmp_path_factory):
        open("fixture_ran", "a").write("x")

    @pytest.mark.parametrize("k", range(7))
    def test_body(k):
        open(f"ran_{k}", "w").close()
"""


def run(tmp_path, *options):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    for old in tmp_path.glob("ran_*"):
        old.unlink()
    (tmp_path / "fixture_ran").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rs", *options], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    ran = sorted(int(p.name[4:]) for p in tmp_path.glob("ran_*"))
    fixture = (tmp_path / "fixture_ran").read_text() if (tmp_path / "fixture_ran").exists() \
        else ""
    return done, ran, fixture


def test_compile_only_sets_up_and_runs_nothing(tmp_path):
    done, ran, fixture = run(tmp_path, "--compile-only")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran == [] and fixture == "x"  # the module fixture once, no test body
    assert "7 skipped" in done.stdout and "--compile-only" in done.stdout


@pytest.mark.parametrize("n", [1, 3, 7, 9])
def test_shards_of_a_small_suite_are_contiguous_slices_that_cover_it(tmp_path, n):
    seen = []
    for k in range(n):
        done, ran, _ = run(tmp_path, "--shard", f"{k}/{n}")
        assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: an empty slice
        if ran:  # one contiguous run of the tests
            assert ran == list(range(ran[0], ran[-1] + 1))
        seen += ran
    assert seen == list(range(7))


@pytest.mark.parametrize("count, n", [(7, 3), (100, 3), (1979, 16), (1207, 16), (64, 16)])
def test_shards_take_runs_from_across_the_suite_and_cover_it_once(count, n):
    """The cut itself (conftest._runs_of_shard): every test in exactly one shard, each
    shard at most RUNS_PER_SHARD runs of neighbours, shards of near-equal size, and a
    shard's runs spread over the suite (its first in the first quarter, its last in the
    last)."""
    shards = [_runs_of_shard(count, k, n) for k in range(n)]
    taken = sorted(i for runs in shards for run in runs for i in range(count)[run])
    assert taken == list(range(count))
    sizes = [sum(len(range(count)[run]) for run in runs) for runs in shards]
    assert max(sizes) - min(sizes) <= RUNS_PER_SHARD
    for runs in shards:
        assert len(runs) <= RUNS_PER_SHARD
        if count >= n * RUNS_PER_SHARD:
            assert runs[0].start < count / 4 and runs[-1].stop > count * 3 / 4


def test_shards_split_what_k_selects_evenly(tmp_path):
    """-k deselects first: each shard runs its share of the selected tests (sharding all
    of them first left most shards of a -k run empty)."""
    seen = []
    for k in range(2):
        done, ran, _ = run(tmp_path, "-k", "body[5] or body[6]", "--shard", f"{k}/2")
        assert done.returncode == 0, done.stdout + done.stderr
        seen.append(ran)
    assert seen == [[5], [6]]


@pytest.mark.parametrize("bad", ["3/3", "-1/2", "a/b", "2"])
def test_a_bad_shard_is_refused(tmp_path, bad):
    done, ran, _ = run(tmp_path, f"--shard={bad}")
    assert done.returncode != 0 and ran == []
    assert "give K/N with 0 <= K < N" in done.stdout + done.stderr
