"""Time scangen's primitives next to their peers: ``python -m scangen bench --primitives``
(scangen/primitive_bench.py), which this runs with the same arguments. Kept so that the
commands recorded with earlier results (docs/results/README.md) still run:

    python benchmarks/primitives.py [--sizes 2^20 2^26] [--json out.json] [--cub] [--only WORD]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scangen import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main(["bench", "--primitives", *sys.argv[1:]]))
