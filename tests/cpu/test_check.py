"""check_operator's pieces that need no GPU: samples, the float tolerance, the report, and
the command line without a GPU. The GPU run is tests/gpu/test_check.py."""
import numpy as np
import pytest

from scangen import GPUUnavailableError
from scangen.check import OperatorReport, _agree, sample_values
from scangen.cli import main
from tests.support import BFLOAT16, needs_bfloat16


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float16", "float32", "float64",
                                   "complex64", "complex128"])
def test_samples_hold_the_edges_and_random_values(dtype):
    dtype = np.dtype(dtype)
    values = sample_values(np.random.default_rng(0), dtype, 1000)
    assert values.dtype == dtype and values.size == 1000
    assert 0 in values and 1 in values
    if dtype.kind in "fc":
        assert np.isfinite(values).all() and np.unique(values).size > 900
    else:
        info = np.iinfo(dtype)
        assert info.min in values and info.max in values


@needs_bfloat16
def test_bfloat16_samples_and_tolerance():
    values = sample_values(np.random.default_rng(0), BFLOAT16, 1000)
    assert values.dtype == BFLOAT16 and 0 in values and 1 in values
    assert np.isfinite(values.astype(np.float32)).all() and np.unique(values).size > 100
    one = np.array([1.0, 100.0], BFLOAT16)
    near = np.array([1.0078125, 100.5], BFLOAT16)  # one bfloat16 ulp and half a ulp away
    assert _agree(one, near, BFLOAT16, None, (one, one, one)).all()
    far = np.array([1.75, 300.0], BFLOAT16)
    assert not _agree(one, far, BFLOAT16, None, (one, one, one)).any()


def test_float_agreement_is_relative_to_the_operands():
    one = np.array([1.0, 1e6, 0.0, np.nan], np.float32)
    eps = np.finfo(np.float32).eps
    other = one * (1 + 8 * eps)
    operands = (one, one, one)
    assert _agree(one, other, np.dtype(np.float32), None, operands).all()
    far = one * np.float32(1.01) + np.float32(0.5)
    assert not _agree(one[:3], far[:3], np.dtype(np.float32), None,
                      tuple(o[:3] for o in operands)).any()
    assert (_agree(np.array([3, 4]), np.array([3, 5]), np.dtype(np.int32), None, ()) ==
            [True, False]).all()


def test_report_reads_and_is_falsy_when_a_law_fails():
    good = OperatorReport("add", "int32", 100)
    assert good and good.ok and "associative with a two-sided identity" in str(good)
    bad = OperatorReport("sub", "int32", 100, {"associativity": 40},
                         ("associativity", 1, 2, 3, -4, 2))
    assert not bad and not bad.ok
    assert "(a op b) op c = -4 but a op (b op c) = 2 for a=1, b=2, c=3" in str(bad)
    identity = OperatorReport("x", "int32", 100, {"left identity": 1},
                              ("left identity", 5, 0, 0, 6, 5))
    assert "left identity fails" in str(identity)


def test_check_command_without_a_gpu_is_one_clear_line(capsys, monkeypatch):
    def no_gpu():
        raise GPUUnavailableError("running a scan needs PyCUDA (simulated: no GPU)")

    monkeypatch.setattr("scangen.runtime.contexts.current_context", no_gpu)
    monkeypatch.setattr("scangen.runtime.gpu.gpuarray", no_gpu)
    code = main(["check", "--dtype", "int32", "--expr", "a - b", "--identity", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err == "error: running a scan needs PyCUDA (simulated: no GPU)\n"


def test_complex_agreement_uses_both_parts():
    one = np.array([1 + 1j, 2 + 0j], np.complex64)
    assert _agree(one, one * np.complex64(1 + 1e-7), np.dtype(np.complex64), None,
                  (one,)).all()
    assert not _agree(one, one + np.complex64(0.5j), np.dtype(np.complex64), None,
                      (one,)).any()
