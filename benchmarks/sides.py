"""Two checkouts timed in one run on one GPU: the alternation that the *_before_after.py
scripts share. Each side runs the calling script again in a process of its own, its
package first on sys.path (``--side LABEL``), the two alternating ``rounds`` times so that
drift of the card hits both."""
import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SOURCE = "SCANGEN_SIDE_SOURCE"


def parser(doc: str, cases: str, default) -> argparse.ArgumentParser:
    """The options every such script takes: --baseline, --rounds, the list of what to time
    (``cases``, e.g. "--sizes", whose value is ``args.cases``; ``default`` if not given),
    and the hidden --side of a child process."""
    made = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    made.add_argument("--baseline", type=Path, help="a checkout of the baseline commit")
    made.add_argument("--rounds", type=int, default=2, help="alternations (default 2)")
    made.add_argument(cases, dest="cases", nargs="+", default=list(default),
                      help=f"default: {' '.join(default)}")
    made.set_defaults(cases_option=cases)
    made.add_argument("--side", help=argparse.SUPPRESS)  # a child process: time one side
    return made


def run(script: str, args, made: argparse.ArgumentParser, time_side) -> int:
    """In a child (``--side``): ``time_side(label, args)`` with that side's package first
    on sys.path. Else both sides, alternating, each a child of ``script``."""
    if args.side:
        sys.path.insert(0, os.environ[_SOURCE])
        time_side(args.side, args)
        return 0
    if args.baseline is None:
        made.error("--baseline is required")
    alternate(script, args.baseline, args.rounds,
              lambda side: ["--side", side, args.cases_option, *args.cases])
    return 0


def alternate(script: str, baseline: Path, rounds: int, arguments) -> None:
    """Run ``script`` once a side, the two alternating ``rounds`` times, each in a process
    whose package comes first on sys.path (source_root); ``arguments(side)``: its
    command line, ``side`` "baseline" or "new"."""
    for _ in range(rounds):
        for side, source in (("baseline", baseline.resolve()), ("new", ROOT)):
            subprocess.run([sys.executable, script, *arguments(side)],
                           env=dict(os.environ, **{_SOURCE: str(source)}), check=True)


def source_root() -> Path:
    """The checkout whose package this process times: its side's, where alternate started
    it, else this one."""
    return Path(os.environ.get(_SOURCE, ROOT))


def queued_timer(trials: int = 9):
    """A scangen.bench.Timer of queued calls (the GPU's time a call, the median of
    ``trials``), on the primary context made current, for the scangen first on sys.path."""
    from scangen.bench import Timer
    from scangen.compile import current_context, require_pycuda

    driver = require_pycuda()
    current_context()
    return Timer(driver, trials, 3, queued=True)
