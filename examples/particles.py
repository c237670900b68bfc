"""Particles in a unit box: drop the ones that left it, then sort the rest by grid cell.

Three scan-based steps, all on the GPU:

1. One ScanKernel keeps the particles still inside the box (a compaction: the scan counts
   them) and writes each kept particle's grid cell beside it, in the same pass.
2. scangen.radix_sort orders the kept particles by cell (a stable sort: particles of one
   cell keep their order), the particle structs carried along as values.
3. scangen.run_length_encode of the sorted cells gives each occupied cell and its count,
   which is what a neighbour search or a per-cell interaction walks over.

Run on a machine with an NVIDIA GPU and PyCUDA:  python examples/particles.py
"""
import sys

import numpy as np

import scangen

try:
    # Device 0's primary context: the one CuPy and torch use, so arrays of all three mix.
    scangen.current_context()
except scangen.GPUUnavailableError as err:  # no PyCUDA or no GPU: say so in one line
    sys.exit(f"this example runs on an NVIDIA GPU: {err}")
from pycuda import gpuarray  # noqa: E402 (after the check, which names what is missing)

#: A particle: position and velocity; scangen declares the same struct for the kernel.
PARTICLE = np.dtype([("x", np.float32), ("y", np.float32), ("vx", np.float32),
                     ("vy", np.float32)])
GRID = 64  # cells per side


def keep_inside(particles):
    """The particles inside [0, 1)^2, in order, and the grid cell of each."""
    kernel = scangen.ScanKernel(
        np.int64, "add",
        arguments="const particle *p, particle *kept, unsigned int *cell, long long *count",
        preamble=f"""
struct particle {{ float x, y, vx, vy; }};
static __device__ bool inside(particle q)
{{
    return q.x >= 0.0f && q.x < 1.0f && q.y >= 0.0f && q.y < 1.0f;
}}
static __device__ unsigned cell_of(particle q)
{{
    return (unsigned)(q.y * {GRID}) * {GRID} + (unsigned)(q.x * {GRID});
}}""",
        input_expr="inside(p[i]) ? 1 : 0",
        output_statement="if (item != prev_item) { kept[prev_item] = p[i];"
                         " cell[prev_item] = cell_of(p[i]); }"
                         " if (i == n - 1) *count = item;")
    n = particles.size
    kept, cells = gpuarray.empty(n, PARTICLE), gpuarray.empty(n, np.uint32)
    count = gpuarray.zeros(1, np.int64)
    kernel(particles, kept, cells, count)
    inside = int(count.get()[0])
    return kept[:inside], cells[:inside]


def step(rng, n):
    """Particles after one step of random motion from random places in the box (some leave)."""
    p = np.zeros(n, PARTICLE)
    p["x"], p["y"] = rng.random(n), rng.random(n)
    p["vx"], p["vy"] = rng.normal(0, 0.05, n), rng.normal(0, 0.05, n)
    p["x"] += p["vx"]
    p["y"] += p["vy"]
    return p


def main(n=1_000_000, seed=3):
    rng = np.random.default_rng(seed)
    host = step(rng, n)
    kept, cells = keep_inside(gpuarray.to_gpu(host))
    cells, by_cell = scangen.radix_sort(cells, kept)
    occupied, counts = scangen.run_length_encode(cells)
    print(f"{kept.size} of {n} particles are still in the box, in {occupied.size} of "
          f"{GRID * GRID} cells (the fullest holds {int(counts.get().max())})")

    # The same with numpy, to show it is right.
    inside = host[(host["x"] >= 0) & (host["x"] < 1) & (host["y"] >= 0) & (host["y"] < 1)]
    cell = ((inside["y"] * GRID).astype(np.uint32) * GRID
            + (inside["x"] * GRID).astype(np.uint32))
    order = np.argsort(cell, kind="stable")
    np.testing.assert_array_equal(by_cell.get(), inside[order])
    want_cells, want_counts = np.unique(cell, return_counts=True)
    np.testing.assert_array_equal(occupied.get(), want_cells)
    np.testing.assert_array_equal(counts.get(), want_counts)
    print("OK: matches numpy (boolean mask, stable argsort, unique with counts)")
    return by_cell


if __name__ == "__main__":
    main()
