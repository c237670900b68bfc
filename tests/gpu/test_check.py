"""check_operator on the GPU: every built-in passes on every dtype it takes, the
non-commutative zoo passes, and broken operators are caught with a counterexample."""
import numpy as np
import pytest

import scangen
from scangen.cli import main

from tests.support import AFFINE, BFLOAT16, OPERATORS, needs_bfloat16, type_operator_pairs


@pytest.mark.parametrize("dtype,op_name", type_operator_pairs())
def test_the_builtins_keep_the_contract(gpu, dtype, op_name):
    report = scangen.check_operator(OPERATORS[op_name], dtype, samples=20_000)
    assert report, str(report)


def test_affine_maps_keep_the_contract(gpu):
    assert scangen.check_operator(AFFINE, np.uint64, samples=20_000)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_subtraction_is_caught(gpu, dtype):
    report = scangen.check_operator(scangen.Operator("a - b", 0, name="minus"), dtype)
    assert not report and "associativity" in report.failures
    law, a, b, c, left, right = report.counterexample
    a, b, c = (np.dtype(dtype).type(v) for v in (a, b, c))  # wrap as the GPU does
    with np.errstate(over="ignore"):
        assert (a - b) - c == pytest.approx(left) and a - (b - c) == pytest.approx(right)


@needs_bfloat16
def test_bfloat16_builtins_keep_the_contract_and_subtraction_is_caught(gpu):
    """bfloat16's ulp is 2^-7: the tolerance (at most 1/16) still lets the built-ins pass
    and still catches a - b."""
    for name in ("add", "mul", "min", "max"):
        report = scangen.check_operator(name, BFLOAT16, samples=20_000)
        assert report, str(report)
    report = scangen.check_operator(scangen.Operator("a - b", 0, name="minus"), BFLOAT16)
    assert not report and "associativity" in report.failures


def test_a_float_expression_that_is_not_associative_is_caught(gpu):
    halfway = scangen.Operator("0.5f * (a + b)", 0, name="halfway")
    report = scangen.check_operator(halfway, np.float32)
    assert not report and report.failures["associativity"] > 0
    assert "left identity" in report.failures  # 0 is no identity of a mean either


def test_a_wrong_identity_is_caught(gpu):
    report = scangen.check_operator(scangen.Operator("a * b", 0, name="times_zero"), np.int32)
    assert not report and set(report.failures) == {"left identity", "right identity"}


def test_check_command(gpu, capsys):
    assert main(["check", "--dtype", "int64", "--op", "max", "--samples", "5000"]) == 0
    assert "associative with a two-sided identity" in capsys.readouterr().out
    assert main(["check", "--dtype", "int32", "--expr", "a - b", "--identity", "0"]) == 1
    assert "breaks the operator contract" in capsys.readouterr().out
