"""The bench's pieces that need no GPU: size parsing, and the CUB peer program compiling."""
import argparse
import shutil
import subprocess

import pytest

from scangen import bench


@pytest.mark.parametrize("text,size", [("1048576", 1 << 20), ("2^20", 1 << 20),
                                       ("2**20", 1 << 20), ("1_000", 1000)])
def test_sizes(text, size):
    assert bench.parse_size(text) == size


@pytest.mark.parametrize("text", ["2^", "x", "-4", "1.5"])
def test_bad_sizes(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_size(text)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_cub_peer_compiles(tmp_path):
    binary = tmp_path / "cub_scan"
    result = subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90", "-o", str(binary),
                             str(bench.CUB_SOURCE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    usage = subprocess.run([str(binary)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
