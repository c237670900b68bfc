"""The examples without a GPU: the GPU ones stop with one line that says what they need,
and the one written for a machine without a GPU runs (its operator checked against the
maps it composes). tests/gpu/test_examples.py runs the GPU ones."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import EXAMPLES, load_example, needs_nvcc

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_A_GPU = "without_a_gpu"
GPU_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("*.py") if p.stem != WITHOUT_A_GPU)


def run_example(name):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_a_gpu_example_says_what_it_needs_in_one_line(name):
    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("PyCUDA is installed: tests/gpu/test_examples.py runs this example")
    done = run_example(name)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("this example runs on an NVIDIA GPU: ")
    assert "pip install 'scangen[cuda]'" in done.stderr


def apply(maps, x):
    """The clamped steps of the example applied to x one after another."""
    for delta, low, high in maps:
        x = min(max(x + delta, low), high)
    return x


def test_the_example_without_a_gpu_reads_plans_and_composes_its_maps(capsys, monkeypatch):
    example = load_example(WITHOUT_A_GPU)
    monkeypatch.setattr("shutil.which", lambda name: None)  # the compile: next test
    scan, plan = example.main(n=5000)
    out = capsys.readouterr().out
    assert "then(a, b)" in out and "plan: inclusive scan with clamped_steps over n=5000" in out
    assert "no nvcc on PATH" in out
    # the operator's composition, written in Python as the preamble writes it in C
    rng = np.random.default_rng(4)

    def then(a, b):
        clamp = (lambda v: min(max(v, b[1]), b[2]))
        return (a[0] + b[0], clamp(a[1] + b[0]), clamp(a[2] + b[0]))

    for _ in range(200):
        steps = [(float(d), float(lo), float(lo + w)) for d, lo, w in
                 zip(rng.integers(-20, 21, 5), rng.integers(-50, 50, 5), rng.integers(0, 60, 5))]
        composed = example.THEN.identity
        for step in steps:
            composed = then(composed, step)
        for x in (-100.0, 0.0, 7.0, 100.0):
            assert apply([composed], x) == apply(steps, x), (steps, x)


@needs_nvcc
def test_the_example_without_a_gpu_compiles_with_nvcc(capsys):
    load_example(WITHOUT_A_GPU).main(n=1000)
    assert "nvcc compiled it for sm_" in capsys.readouterr().out
