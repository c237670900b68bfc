"""Radix passes and histograms without a GPU: what the modules render, the tile shapes they
choose, the checks made before anything runs, and the CLI. (nvcc compiles every module in
test_compile_nvcc's radix_histogram batch; the GPU tests check the results.)"""
import subprocess
import sys

import numpy as np
import pytest

import scangen
from scangen.primitives.histogram import HistogramModule, outer_edges
from scangen.primitives.radix import KEY_DTYPES, RadixModule


@pytest.mark.parametrize("key", KEY_DTYPES, ids=str)
def test_keys_order_by_their_kind(key):
    text = RadixModule(key).module_source().text
    kind = {"u": "unsigned", "i": "signed", "f": "float"}[key.kind]
    assert f"({kind} keys)" in text
    assert f"typedef {scangen.ELEMENT_TYPES[key].c_name} radix_key_t;" in text
    if kind == "float":
        assert "if (key != key)" in text and "bits = 0" in text  # NaN last, -0.0 as +0.0


def test_tiles_shrink_as_keys_and_values_widen():
    shapes = {(key, value): (m.block_size, m.items_per_thread)
              for key, value in [("uint32", None), ("uint16", "uint16"), ("uint32", "uint32"),
                                 ("float64", "int64"), ("uint64", "complex128")]
              for m in [RadixModule(np.dtype(key), value and np.dtype(value))]}
    assert shapes == {("uint32", None): (256, 16), ("uint16", "uint16"): (256, 16),
                      ("uint32", "uint32"): (256, 16), ("float64", "int64"): (256, 8),
                      ("uint64", "complex128"): (256, 4)}
    assert RadixModule(np.dtype("float64"), output="dest").tile_size == 4096
    big = np.dtype([("a", np.float64, (32,))])
    with pytest.raises(TypeError, match="too large to stage"):
        RadixModule(np.dtype("uint32"), big).items_per_thread


def test_entry_points_match_the_source():
    for module in (RadixModule(np.dtype("int16"), np.dtype("float32")),
                   RadixModule(np.dtype("float32"), output="dest", radix_bits=3),
                   RadixModule(np.dtype("int8"), np.dtype("int64"), index_values=True)):
        text = module.module_source().text
        for name, parameters in module.entry_points():
            declared = ", ".join(p.declaration for p in parameters)
            assert f"{name}({declared})" in text
        assert ("values ? values[start + j] : (radix_value_t)(start + j)" in text) == \
            module.index_values
    assert "static const int RADIX_BITS = 3;" in \
        RadixModule(np.dtype("float32"), output="dest", radix_bits=3).module_source().text


def test_sources_show_the_passes():
    source = scangen.RadixSort(np.float32).source
    assert "radix_digit_counts(" in source and "radix_onesweep(" in source
    assert "digit_look_back(status, tile, digit, epoch)" in source
    wide = scangen.RadixDigitOffsets(np.uint32, 12).source
    assert "radix_onesweep(" in wide and "radix_places_from_order(" in wide


@pytest.mark.parametrize("make,error,message", [
    (lambda: scangen.RadixSort(np.complex64), TypeError, "cannot be radix sorted"),
    (lambda: scangen.RadixSort(np.float16), TypeError, "cannot be radix sorted"),
    (lambda: scangen.RadixSort(np.uint32, "not a dtype"), TypeError, "dtype"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=0), ValueError, "1..16 bits"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=17), ValueError, "1..16 bits"),
    (lambda: scangen.RadixDigitOffsets(np.uint32, bits=2.0), TypeError, "bits must be an int"),
    (lambda: RadixModule(np.dtype("uint32"), np.dtype("int8"), output="dest"), ValueError,
     "moves no values"),
    (lambda: RadixModule(np.dtype("uint32"), np.dtype("int8"), output="places"), ValueError,
     "moves no values"),
    (lambda: RadixModule(np.dtype("uint32"), output="ranks"), ValueError, "'places'"),
    (lambda: scangen.Histogram(np.complex64), TypeError, "histogram takes"),
])
def test_construction_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_histogram_checks_bins_and_range_as_numpy():
    assert outer_edges(3, (0, 1)) == (0.0, 1.0)
    assert outer_edges(100, (5, 5)) == (4.5, 5.5)  # an empty range widens, as numpy's
    for bins, range_, error, message in [
            (0, (0, 1), ValueError, "at least 1"), (2.5, (0, 1), TypeError, "an int"),
            ([0, 1, 2], (0, 1), TypeError, "an int"), (4, None, TypeError, "is required"),
            (4, (1, 0), ValueError, "past the high end"), (4, (0, np.inf), ValueError, "finite")]:
        with pytest.raises(error, match=message):
            outer_edges(bins, range_)


def test_histogram_compares_in_numpys_bin_type():
    assert HistogramModule(np.dtype("float32")).edge_dtype == np.float32
    assert np.histogram_bin_edges(np.zeros(3, np.float32), 4, (0, 1)).dtype == np.float32
    for dtype in ("float64", "int8", "uint64"):
        assert HistogramModule(np.dtype(dtype)).edge_dtype == np.float64
        assert np.histogram_bin_edges(np.zeros(3, dtype), 4, (0, 1)).dtype == np.float64
    assert "typedef float edge_t;" in HistogramModule(np.dtype("float32")).module_source().text


@pytest.mark.parametrize("what", ["radix_sort", "argsort", "radix_digit_offsets", "histogram"])
def test_cli_prints_the_source(what):
    result = subprocess.run([sys.executable, "-m", "scangen", "source", what, "--dtype",
                             "int32"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "extern \"C\" __global__" in result.stdout
    refused = subprocess.run([sys.executable, "-m", "scangen", "source", what, "--dtype",
                              "int32", "--algorithm", "naive"], capture_output=True, text=True)
    assert refused.returncode != 0 and "takes no --algorithm" in refused.stderr
