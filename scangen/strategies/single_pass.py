"""Single-pass strategies: one launch, blocks take tiles in ticket order and obtain their
prefix from earlier tiles' published status (about 2n of traffic).

* chained: the seeds' stream scan; each tile waits for its predecessor's inclusive prefix.
* decoupled_lookback (Merrill & Garland 2016): each tile publishes its aggregate at once and
  looks back over up to 32 predecessors at a time.

The total is known only when the last tile finishes, so an output statement that uses
last_item cannot run on these strategies.
"""
from __future__ import annotations

from ..arith import ceil_div
from ..families import ONE_SECTION, SCAN_TILES, SCAN_TILES_PERSISTENT, Kernel
from .base import PlanBuilder, Strategy, register
from .one_section import ONE_SECTION_STRATEGY
from .tile_state import TileState


class SinglePass(Strategy):
    provides_last_item = False

    def __init__(self, name: str, summary: str, how: str):
        self.name, self.summary, self.how = name, summary, how

    @property
    def protocol(self) -> str:
        """How the tile kernel obtains its prefix (the template's switch)."""
        return self.name

    def kernels(self):
        """The persistent kernel only where the spec has one (ScanModule.kernels)."""
        return (Kernel(ONE_SECTION, "user"), Kernel(SCAN_TILES, "user"),
                Kernel(SCAN_TILES_PERSISTENT, "user"))

    def build(self, builder: PlanBuilder, n: int, io_arg, level: int) -> None:
        spec = builder.spec
        if n <= spec.section_size:
            return ONE_SECTION_STRATEGY.build(builder, n, io_arg, level)
        tiles = ceil_div(n, spec.section_size)
        state = TileState.of(spec)
        status = builder.tile_status(tiles)
        persistent = builder.options.persistent_tiles and \
            n * spec.acc_itemsize >= spec.tuning.at(spec.acc_itemsize).tile_persistent_min_bytes
        family = SCAN_TILES_PERSISTENT if persistent else SCAN_TILES
        builder.launch(Kernel(family, "user"), tiles, io_arg,
                       (*status, n),
                       reads=n, writes=n, level=level, persistent=persistent,
                       why=f"{self.name}: {tiles} tiles in one pass"
                           f"{' by persistent blocks' if persistent else ''}, "
                           f"{self.how}; status {state.status_bytes(tiles)} B")


CHAINED = register(SinglePass("chained",
                              "the seeds' stream scan: each tile waits for its predecessor",
                              "each waits for its predecessor's inclusive prefix"))
DECOUPLED_LOOKBACK = register(SinglePass(
    "decoupled_lookback", "decoupled look-back: one pass, ~2n traffic",
    "each looks back over up to 32 predecessors' status at a time"))
