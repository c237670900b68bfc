"""``python -m scangen``: read the CUDA a scan emits, explain its launch plan, run a demo.

Each subcommand is one function registered with :func:`subcommand`; the options that
describe a scan are added by :func:`add_spec_options` and turned into a :class:`Scan` by
:func:`build_scan`, so a new subcommand (``bench``, say) is one decorated function.

Exit status: 0 success, 1 a result or compile failure, 2 a usage or validation error or no GPU.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import textwrap

import numpy as np

from . import __version__, axis_bench, bench, info, ops, primitive_bench, tune
from .check import check_operator
from .ops import BUILTIN_OPERATORS, LAST_NONZERO, Operator
from .primitives.registry import COMMAND_LINE, OPTIONS, PLAN_OPTIONS, owners
from .reference import reference_scan
from .runtime.contexts import current_context
from .scan import GPUUnavailableError, Scan, ScanCompileError
from .spec import ALGORITHMS, MODES, STRATEGIES
from .types import supported_names
from .workloads import parse_size

PROG = "scangen"


class CLIError(Exception):
    """A bad request: printed as ``error: ...`` with exit status 2, never as a traceback."""


# --------------------------------------------------------------------------- registry

#: name -> (function, help, description, arguments, takes_spec_options, configure)
COMMANDS: dict = {}


def arg(*flags, **kwargs):
    """One ``add_argument`` call, stored until the subparser exists."""
    return flags, kwargs


def subcommand(name, help, *arguments, spec_options=False, description=None, configure=None):
    """Register ``func(args) -> int`` as ``python -m scangen NAME``.

    ``arguments`` are :func:`arg` tuples; ``configure(parser)``, if given, adds more (for a
    module that owns its options, like scangen.bench).
    """

    def register(func):
        COMMANDS[name] = (func, help, description or help, arguments, spec_options, configure)
        return func

    return register


# ----------------------------------------------------------------- spec options

#: Defaults come from Scan itself, so the help text cannot drift from the library.
_SCAN_DEFAULTS = {
    name: p.default for name, p in inspect.signature(Scan.__init__).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def _default(name: str) -> str:
    """Help text for a Scan default; None means the library chooses per dtype and algorithm."""
    value = _SCAN_DEFAULTS.get(name)
    if value is None:
        return "default: chosen by scangen; the first lines of 'source' and 'plan' show it"
    return f"default: {value}"


def parse_identity(text: str):
    """An identity as typed, read as Operator reads a string identity (scangen.ops
    parse_identity): an int (0x.. too), a float, inf, -inf, lowest or highest."""
    try:
        return ops.parse_identity(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def algorithm_table() -> str:
    width = max(len(name) for name in ALGORITHMS)
    rows = [f"  {name:<{width}}  {algo.summary}" for name, algo in ALGORITHMS.items()]
    return "algorithms (--algorithm):\n" + "\n".join(rows)


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    """The options that describe one scan, shared by every subcommand that builds one."""
    group = parser.add_argument_group("scan", "what to scan and how (any invalid combination "
                                      "is reported with the library's message)")
    dtypes = supported_names()
    group.add_argument("--dtype", default="float32",
                       help=f"element type: {dtypes} (default: float32)")
    group.add_argument("--op", metavar="NAME",
                       help=f"built-in operator: {', '.join(BUILTIN_OPERATORS)} "
                       f"(default: {_SCAN_DEFAULTS['operator']})")
    group.add_argument("--expr", metavar="C_EXPR",
                       help="a user operator instead of --op: a C expression in a (the earlier "
                       "operand) and b (the later one), e.g. 'b != 0 ? b : a'; it must be "
                       "associative; needs --identity")
    group.add_argument("--identity", type=parse_identity, metavar="VALUE",
                       help="identity of --expr: an integer, a float, inf, -inf, or lowest/"
                       "highest (the dtype's limits)")
    group.add_argument("--name", help="name of the --expr operator, a C identifier "
                       "(default: user_op)")
    group.add_argument("--preamble", metavar="C_TEXT",
                       help="C text emitted before the combine function, e.g. a __device__ "
                       "helper that --expr calls (scan_t is the element type)")
    group.add_argument("--mode", choices=MODES, default=_SCAN_DEFAULTS["mode"],
                       help="inclusive: y[i] = x[0] op ... op x[i]; exclusive: y[i] = "
                       f"identity op x[0] op ... op x[i-1] ({_default('mode')})")
    group.add_argument("--algorithm", choices=list(ALGORITHMS), metavar="NAME",
                       default=_SCAN_DEFAULTS["algorithm"],
                       help="how one block scans its section; see the list below "
                       f"({_default('algorithm')})")
    group.add_argument("--section-size", type=parse_size, metavar="N",
                       default=_SCAN_DEFAULTS["section_size"],
                       help=f"elements per block, a power of two ({_default('section_size')})")
    group.add_argument("--items-per-thread", type=parse_size, metavar="K",
                       default=_SCAN_DEFAULTS["items_per_thread"],
                       help="coarsening factor (elements per thread), a power of two; only "
                       "algorithms that coarsen accept it (default: the algorithm's own)")
    group.add_argument("--strategy", choices=STRATEGIES, metavar="NAME",
                       default=_SCAN_DEFAULTS["strategy"],
                       help="how sections are stitched into a whole-array scan: "
                       f"{', '.join(STRATEGIES)} ({_default('strategy')})")


def build_operator(args):
    """The operator the options name: a built-in's name, or an Operator for --expr."""
    if args.expr is None:
        for option in ("identity", "name", "preamble"):
            if getattr(args, option) is not None:
                raise CLIError(f"--{option} describes a user operator and needs --expr")
        return args.op if args.op is not None else _SCAN_DEFAULTS["operator"]
    if args.op is not None:
        raise CLIError("give either --op (a built-in operator) or --expr (a user operator), "
                       "not both")
    if args.identity is None:
        raise CLIError("--expr needs --identity: the value e with e op x == x op e == x")
    extra = {}
    if args.name is not None:
        extra["name"] = args.name
    if args.preamble is not None:
        extra["preamble"] = args.preamble
    try:
        return Operator(args.expr, args.identity, **extra)
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None


def build_scan(args) -> Scan:
    """A Scan from the spec options; the library validates, its message becomes a CLIError."""
    operator = build_operator(args)
    try:
        return Scan(args.dtype, operator, mode=args.mode, algorithm=args.algorithm,
                    section_size=args.section_size, items_per_thread=args.items_per_thread,
                    strategy=args.strategy)
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None


#: What `source` and `plan` can build besides a scan: name -> scangen.primitives.registry.
#: CommandLine, which each primitive's own module declares.
PRIMITIVES = COMMAND_LINE


def _belongs(option: str) -> str:
    """``--option belongs to a, b and c``: the primitives that take it."""
    names = owners(option)
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"--{option} belongs to {listed}"


def build_primitive(args):
    """A primitive from the spec options and the options it takes (--predicate, --bits)."""
    entry = PRIMITIVES[args.what]
    given = {}
    for option in OPTIONS:
        value = getattr(args, option)
        if value is None:
            if option in entry.needs:
                raise CLIError(f"{args.what} needs --{option}")
        elif option not in entry.takes:
            raise CLIError(f"{_belongs(option)}, not {args.what}")
        else:
            given[option] = value
    # Only the options given: a primitive's defaults (Unique's measured tile, say) hold
    # where none is.
    options = {k: v for k, v in dict(algorithm=args.algorithm, section_size=args.section_size,
                                     items_per_thread=args.items_per_thread,
                                     strategy=args.strategy).items() if v is not None}
    if not entry.scan_options:
        # Kernels with a tile shape of their own: the scan options do not apply.
        named = [f"--{k.replace('_', '-')}" for k, v in options.items()
                 if not (k == "strategy" and v == "auto")]
        if named:
            raise CLIError(f"{args.what} takes no {', '.join(named)}")
        options = {}
    try:
        return entry.build(args.dtype, options, **given)
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None


# ----------------------------------------------------------------- subcommands

#: What source and plan take besides the spec options: a scan or a primitive.
_WHAT = (
    arg("what", nargs="?", default="scan", choices=["scan", *PRIMITIVES],
        help="a scan (the default) or a primitive: " + ", ".join(PRIMITIVES)),
    arg("--predicate", metavar="C_EXPR",
        help=f"the predicate of {', '.join(owners('predicate'))}: a C expression in x "
        "(the element) and i (its index), e.g. 'x > 0.5f'"),
    arg("--bits", type=int, metavar="B",
        help=f"the digit width of {', '.join(owners('bits'))}: 1 to 16 (default 8; wider "
        "than 8 adds the places module)"),
)


def build_what(args):
    """The scan or primitive ``what`` names, from the spec options."""
    if args.what != "scan":
        return build_primitive(args)
    for option in OPTIONS:
        if getattr(args, option) is not None:
            raise CLIError(_belongs(option))
    return build_scan(args)


@subcommand("source", "print the CUDA source a scan or a primitive emits (no GPU needed)",
            *_WHAT,
            arg("--check", action="store_true",
                help="also compile it with the nvcc on PATH (no GPU needed); a C error in "
                "your code is reported with the numbered source around it (exit 1)"),
            spec_options=True,
            description="Print the CUDA source of every kernel the described scan (or "
            "primitive) launches. Needs no GPU and no PyCUDA.")
def cmd_source(args) -> int:
    scan = build_what(args)
    print(scan.source, end="")
    if args.check:
        scan.check_compile()
        print("// --check: nvcc compiled this module without errors", file=sys.stderr)
    return 0


@subcommand("plan", "print the kernel launches that scan N elements (no GPU needed)",
            arg("--n", type=parse_size, required=True, metavar="N",
                help="number of elements, e.g. 1000000, 2^20 or 2**20"),
            *_WHAT,
            arg("--bins", type=int, metavar="B",
                help=f"the bins of {', '.join(owners('bins'))} (default 10)"),
            spec_options=True,
            description="Print the launch plan (kernels, grids, temporaries, bytes moved) that "
            "scans N elements with the described scan, or that a primitive runs over N "
            "elements. Needs no GPU and no PyCUDA.")
def cmd_plan(args) -> int:
    scan = build_what(args)
    given = [getattr(args, option) for option in PLAN_OPTIONS]
    takes = PRIMITIVES[args.what].plan_takes if args.what != "scan" else ()
    for option in PLAN_OPTIONS:
        if getattr(args, option) is not None and option not in takes:
            raise CLIError(f"{_belongs(option)}, not {args.what}")
    try:
        plan = scan.plan(args.n, *[v for v in given if v is not None])
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None
    print(plan.describe())
    return 0


def last_nonzero_numpy(x: np.ndarray) -> np.ndarray:
    """Inclusive "last non-zero wins" scan in plain numpy, independent of scangen."""
    positions = np.where(x != 0, np.arange(x.size), -1)
    latest = np.maximum.accumulate(positions) if x.size else positions
    return np.where(latest >= 0, x[np.maximum(latest, 0)], 0).astype(x.dtype)


@subcommand("check", "check that an operator is associative with an identity (needs PyCUDA)",
            arg("--samples", type=parse_size, default=100_000, metavar="N",
                help="random and edge triples to try (default: %(default)s)"),
            arg("--seed", type=int, default=0, help="random seed (default: %(default)s)"),
            spec_options=True,
            description="Evaluate the operator (--op, or --expr with --identity) on random and "
            "edge triples of --dtype on the GPU, with the code a scan of it compiles: "
            "(a op b) op c against a op (b op c), and the identity on both sides. Exit 0 "
            "when the contract holds, 1 with a counterexample when it does not.")
def cmd_check(args) -> int:
    operator = build_operator(args)
    try:
        report = check_operator(operator, args.dtype, samples=args.samples, seed=args.seed)
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None
    print(report)
    return 0 if report.ok else 1


def _summary_and_operator(source: str, lines: int) -> str:
    """The module's summary (its opening comments, up to the first blank line) and
    ``lines`` lines from the operator's function on, "..." between them: what a reader of
    the demo looks for, wherever the shared constants before the operator end."""
    text = source.splitlines()
    summary = text[:text.index("")] if "" in text else []
    operator = next((k for k, line in enumerate(text) if line.startswith("// The operator")),
                    len(summary))
    return "\n".join(summary + ["..."] + text[operator:operator + lines])


@subcommand("demo", "run a non-commutative scan on the GPU and check it (needs PyCUDA)",
            arg("--n", type=parse_size, default=1_000_003, metavar="N",
                help="number of elements; the default spans two levels of the hierarchy "
                "(default: %(default)s)"),
            arg("--algorithm", choices=list(ALGORITHMS), metavar="NAME",
                default=_SCAN_DEFAULTS["algorithm"],
                help=f"block algorithm: {', '.join(ALGORITHMS)} ({_default('algorithm')})"),
            arg("--seed", type=int, default=0, help="random seed (default: %(default)s)"),
            arg("--lines", type=int, default=40, metavar="K",
                help="lines of emitted CUDA to show from the operator's function on, after "
                "the module's summary (default: %(default)s)"),
            description="Scan random int32 data on the GPU with 'last non-zero wins' "
            "(b != 0 ? b : a), an operator that is associative but not commutative, so a "
            "scan that swaps operands gives wrong answers. Checks the result against "
            "scangen.reference_scan and an independent numpy computation, and shows the "
            "emitted CUDA's summary and its operator.")
def cmd_demo(args) -> int:
    if args.n < 0:
        raise CLIError(f"--n must be >= 0, not {args.n}")
    try:
        scan = Scan(np.int32, LAST_NONZERO, mode="inclusive", algorithm=args.algorithm)
    except (ValueError, TypeError) as err:
        raise CLIError(str(err)) from None
    context = current_context()  # raises GPUUnavailableError, which main reports
    from pycuda import gpuarray

    rng = np.random.default_rng(args.seed)
    # Mostly zeros, so most outputs repeat an earlier element: order mistakes show.
    x = np.where(rng.random(args.n) < 0.7, 0, rng.integers(-1000, 1000, args.n)).astype(np.int32)
    print(f"{scan!r} on {context.get_device().name()}, n={args.n}")
    print(f"--- the emitted CUDA's summary and {args.lines} lines from its operator on "
          f"(python -m scangen source --dtype int32 --expr 'b != 0 ? b : a' --identity 0 "
          f"for all) ---")
    print(_summary_and_operator(scan.source, args.lines))
    print("---")

    y = scan(gpuarray.to_gpu(x)).get()
    checks = {"scangen.reference_scan": reference_scan(x, LAST_NONZERO),
              "numpy": last_nonzero_numpy(x)}
    failed = False
    for name, expected in checks.items():
        bad = np.flatnonzero(y != expected)
        if bad.size:
            failed = True
            i = bad[0]
            print(f"MISMATCH against {name}: {bad.size} of {args.n} elements differ; first at "
                  f"index {i}: got {y[i]}, expected {expected[i]}")
        else:
            print(f"OK: matches {name} ({args.n} elements)")
    print("first 12 inputs: ", x[:12])
    print("first 12 outputs:", y[:12])
    return 1 if failed else 0


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    bench.add_arguments(parser)


@subcommand("bench", "time scangen's strategies and algorithms against peers (needs PyCUDA)",
            configure=_bench_arguments,
            description="Time scangen's strategies and block algorithms, and the peers that "
            "are installed (torch, cupy, pycuda), over a range of sizes; print a table and "
            "write JSON and a plot. With --primitives, time the primitives instead, against "
            "torch, CuPy and (--cub) CUB; with --axis, scans of N-D arrays along an axis "
            "against torch and CuPy. See scangen/bench.py, scangen/primitive_bench.py and "
            "scangen/axis_bench.py for how they measure.")
def cmd_bench(args) -> int:
    if args.axis and args.primitives:
        raise CLIError("bench: --axis and --primitives are two benches; give one")
    if args.axis:
        try:
            axis_bench.check_arguments(args)
        except ValueError as err:
            raise CLIError(f"bench --axis: {err}") from None
        return axis_bench.main(args)
    if args.primitives:
        if args.sizes is None:
            args.sizes = bench.PRIMITIVE_SIZES
        return primitive_bench.main(args)
    return bench.main(args)


def _tune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=parse_size, default=1 << 26, metavar="N",
                        help="elements each candidate scans (default 2^26)")
    parser.add_argument("--sizes", nargs="+", type=int, default=sorted(tune.DTYPES),
                        choices=sorted(tune.DTYPES), metavar="BYTES",
                        help="element sizes to tune: 1 2 4 8 (uint8, int16, float32, float64)")
    parser.add_argument("--budget", type=float, default=600, metavar="SECONDS",
                        help="time for compiling and measuring (default %(default)s); the "
                             "table's own values are always measured")
    parser.add_argument("--blocks", nargs="+", type=int, default=list(tune.BLOCKS),
                        help="threads a tile (default %(default)s)")
    parser.add_argument("--items", nargs="+", type=int, default=list(tune.ITEMS),
                        help="items a thread (default %(default)s)")
    parser.add_argument("--bounds", nargs="+", type=int, default=list(tune.BOUNDS),
                        help="tile_min_threads_per_sm register bounds (default %(default)s)")
    parser.add_argument("--no-vector-runs", dest="vector_runs", action="store_const",
                        const=[False], default=list(tune.VECTOR_RUNS),
                        help="time runs moved warp by warp only (by default also in 16-byte "
                             "words, tile_vector_runs, where a run fills them)")
    parser.add_argument("--trials", type=int, default=5, help="timed trials (median kept)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="where to write the table (default: this GPU's file in the "
                             "user's cache, which scangen then uses)")


@subcommand("info", "print what scangen sees: versions, nvcc, the GPU, the tuning table, the "
            "cache (no GPU needed)",
            description="Print scangen's version and place, Python's and numpy's, the optional "
            "packages installed, nvcc, CUDA_VISIBLE_DEVICES, device 0's name and how it was "
            "found, the tuning table a process uses and scangen's cache folder: what a bug "
            "report needs.")
def cmd_info(args) -> int:
    return info.main()


@subcommand("tune", "measure the scan's tiles on this GPU and save its table (needs PyCUDA)",
            configure=_tune_arguments,
            description="Time the single pass with every tile, register bound and way of "
            "moving runs (warp by warp, or in 16-byte words) of a grid "
            "for 1-, 2-, 4- and 8-byte values on this GPU, and save the fastest as this "
            "GPU's tuning table, which new processes on it then use (SCANGEN_TUNING=default "
            "ignores it). A candidate replaces the table in effect only where it is at least "
            "2% faster. See scangen/tune.py.")
def cmd_tune(args) -> int:
    return tune.main(args)


# ----------------------------------------------------------------- entry point

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Generate, inspect and run CUDA parallel scans (prefix sums) for any "
        "associative operator.",
        epilog=textwrap.dedent(f"""\
            examples:
              {PROG} source --dtype int32 --op add --mode exclusive --algorithm brent_kung
              {PROG} source --dtype float64 --expr 'b != 0 ? b : a' --identity 0 --name last_nonzero
              {PROG} plan --n 1000000 --algorithm coarsened --items-per-thread 8
              {PROG} plan --n 2^24 radix_sort --dtype uint32
              {PROG} demo
              {PROG} bench --sizes 2^20 2^24 --no-peers

            Run '{PROG} COMMAND --help' for a command's options.
            """),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (func, help, description, arguments, spec_options, configure) in COMMANDS.items():
        sub = subparsers.add_parser(
            name, help=help, description=description,
            epilog=algorithm_table() if spec_options or name == "demo" else None,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        for flags, kwargs in arguments:
            sub.add_argument(*flags, **kwargs)
        if configure is not None:
            configure(sub)
        if spec_options:
            add_spec_options(sub)
        sub.set_defaults(func=func)
    return parser


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--identity -inf`` -> ``--identity=-inf``: argparse takes "-inf" for an option."""
    joined = []
    for token in argv:
        if joined and joined[-1] in _NEGATIVE_VALUE_OPTIONS and token.startswith("-"):
            joined[-1] = f"{joined[-1]}={token}"
        else:
            joined.append(token)
    return joined


_NEGATIVE_VALUE_OPTIONS = ("--identity",)


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); return the exit status."""
    parser = build_parser()
    argv = _join_negative_values(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse: --help (0) or a usage error (2)
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    args.argv = argv[1:]  # the command's own arguments, for what records them (tune)
    try:
        return args.func(args)
    except (CLIError, GPUUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ScanCompileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `python -m scangen source | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
