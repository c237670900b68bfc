"""Spec -> CUDA text. One Jinja2 Environment, StrictUndefined; no CUDA import here."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

from . import tuning
from .spec import ScanSpec

_HERE = Path(__file__).resolve().parent
#: Installed wheels carry the templates inside the package; a source checkout (or an
#: editable install) keeps them at the top level of the repository.
TEMPLATE_DIRS = [p for p in (_HERE / "templates", _HERE.parent / "templates") if p.is_dir()]


class RenderError(RuntimeError):
    """A template failed to render; names the template and the spec it was given."""


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    if not TEMPLATE_DIRS:
        raise RenderError(f"scangen's templates are missing (looked in {_HERE}/templates)")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(p) for p in TEMPLATE_DIRS]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


@dataclass(frozen=True)
class ModuleSource:
    """The CUDA text of one module and the kernels it defines."""

    text: str
    kernel_names: tuple[str, ...]

    def numbered(self) -> str:
        """The text with line numbers, as shown next to compiler errors."""
        lines = self.text.splitlines()
        width = len(str(len(lines)))
        return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))


#: Threads per block of the add_prefixes kernel (a plain elementwise pass).
ADD_BLOCK_SIZE = 256


def add_block_size(spec: ScanSpec) -> int:
    return min(ADD_BLOCK_SIZE, spec.section_size)


SINGLE_PASS_STRATEGIES = ("auto", "chained", "decoupled_lookback")


def tiles_strategy(spec: ScanSpec) -> str | None:
    """The single-pass strategy the module's tile kernel implements, if it has one."""
    if spec.strategy not in SINGLE_PASS_STRATEGIES:
        return None
    return "chained" if spec.strategy == "chained" else "decoupled_lookback"


def _scans_totals(spec: ScanSpec) -> bool:
    """Whether the module scans section totals (hierarchical, reduce_then_scan, auto)."""
    return spec.strategy in ("hierarchical", "reduce_then_scan", "auto")


def section_modes(spec: ScanSpec) -> tuple[str, ...]:
    """Block scans the module needs: the user's mode, and exclusive for scanning totals."""
    if not _scans_totals(spec) or spec.mode == "exclusive":
        return (spec.mode,)
    return ("inclusive", "exclusive")


def kernel_names(spec: ScanSpec) -> tuple[str, ...]:
    """Every kernel of the module, in the order the source defines them.

    scan_sections_<mode> is in every module: it is the one-block path for any n that fits
    one section, whatever the strategy.
    """
    names = tuple(f"scan_sections_{m}" for m in section_modes(spec))
    if _scans_totals(spec):
        names += ("add_prefixes",)
    if spec.strategy in ("reduce_then_scan", "auto"):
        names += ("reduce_sections", f"scan_sections_seeded_{spec.mode}")
    if tiles_strategy(spec):
        names += (f"scan_tiles_{spec.mode}",)
    return names


def packed_status(spec: ScanSpec) -> bool:
    """Values of 32 bits or less share one 64-bit status word with their flag."""
    return spec.etype.itemsize <= 4


def template_context(spec: ScanSpec) -> dict:
    etype = spec.etype
    return dict(
        dtype=etype.name,
        c_type=etype.c_name,
        operator_name=spec.operator.name,
        combine_expression=spec.operator.c_expression(etype),
        identity=spec.identity_literal,
        preamble=spec.operator.preamble.strip(),
        mode=spec.mode,
        algorithm=spec.algorithm,
        section_size=spec.section_size,
        block_size=spec.block_size,
        items_per_thread=spec.items_per_thread,
        pad_every=spec.pad_every,
        strategy=spec.strategy,
        strategy_of_tiles=tiles_strategy(spec),
        packed_status=packed_status(spec),
        backoff_min_ns=tuning.BACKOFF_MIN_NS,
        backoff_max_ns=tuning.BACKOFF_MAX_NS,
        tile_min_blocks=tuning.tile_min_blocks(spec.block_size),
        section_modes=section_modes(spec),
        kernel_names=kernel_names(spec),
        add_block_size=add_block_size(spec),
    )


@functools.lru_cache(maxsize=256)
def render(spec: ScanSpec) -> ModuleSource:
    """Render the module for ``spec``. Pure text; works with no GPU and no pycuda."""
    context = template_context(spec)
    try:
        text = environment().get_template("scan.cu.j2").render(**context)
    except jinja2.TemplateError as err:
        raise RenderError(f"rendering scan.cu.j2 for {spec} failed: {err}\ncontext: {context}") \
            from err
    return ModuleSource(text, kernel_names(spec))
