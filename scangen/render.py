"""Spec -> CUDA text. One Jinja2 Environment, StrictUndefined; no CUDA import here."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

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


def section_modes(spec: ScanSpec) -> tuple[str, ...]:
    """Section kernels the module needs: the user's mode, and exclusive for scanning totals."""
    return (spec.mode,) if spec.mode == "exclusive" else ("inclusive", "exclusive")


def kernel_names(spec: ScanSpec) -> tuple[str, ...]:
    return tuple(f"scan_sections_{m}" for m in section_modes(spec)) + ("add_prefixes",)


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
        section_modes=section_modes(spec),
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
