"""The examples in the public docstrings (their "Examples" sections, which the API
reference shows) run as written, on the CPU, with ``np`` and ``scangen`` in scope."""
import doctest
import inspect

import numpy as np
import pytest

import scangen


def examples():
    """(name, doctest) for each public class and function whose docstring has examples,
    its methods' included."""
    finder = doctest.DocTestFinder()
    found = []
    for name in scangen.__all__:
        obj = getattr(scangen, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        for test in finder.find(obj, name=f"scangen.{name}",
                                globs={"np": np, "scangen": scangen}):
            if test.examples:
                found.append(pytest.param(test, id=test.name))
    return found


def test_some_public_docstrings_have_examples():
    names = {param.values[0].name for param in examples()}
    assert {"scangen.Scan", "scangen.Operator", "scangen.reference_scan"} <= names


@pytest.mark.parametrize("test", examples())
def test_a_docstring_example_runs_as_written(test):
    runner = doctest.DocTestRunner(verbose=False,  # else it reads -v in sys.argv
                                   optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
    assert runner.tries == len(test.examples) and runner.failures == 0
