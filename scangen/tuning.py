"""Tuning values, in one table, apart from the code that uses them (as CUB keeps its policies).

Measured on an H200 (sm_90) with ``python -m scangen bench``; see docs/performance.md.
A :class:`Tuning` is part of every ScanSpec (and so of the compile cache key): a sweep
builds specs with other values instead of changing this module.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TileShape:
    """Defaults of the fast (warp_shuffle) path for one element size."""

    #: Threads per block.
    block_size: int
    #: Items each thread scans sequentially in registers; section = block_size * items.
    items_per_thread: int

    @property
    def section_size(self) -> int:
        return self.block_size * self.items_per_thread


#: By element size in bytes. Sections must be powers of two. 4- and 8-byte values: tiles
#: of 32 KiB, as measured best for the single pass with warp runs at 1024 threads per
#: multiprocessor (H200, 2026-11-23, benchmarks/tune_single_pass.py --warp-runs, % of copy
#: at 2^24 / 2^28): float32 256x32 61.3/67.8, 128x32 59.1/66.0, 256x16 53.5/55.8, 128x64
#: 18.1/16.0; float64 256x16 67.2/76.5, 128x16 67.4/75.1, 128x32 37.1/36.9. 8-byte values
#: then moved to 16 KiB tiles (256x8), two of which fit the persistent kernel's shared
#: memory (PERSISTENT_TILES_MIN_BYTES). 2-byte values: 256x32 tiles at 1024 threads per
#: multiprocessor (H200, 2026-11-24, int16 single pass, % of copy at 2^20 / 2^22 / 2^24 /
#: 2^26 / 2^28: 256x16 at 1536 threads 50.7/26.8/37.3/37.7/38.5, 256x32 at 1024
#: 60.4/36.8/40.0/43.0/42.8; reduce_then_scan, auto's choice from 16 MiB before, 256x16
#: 39.8-41.4 from 2^24, 256x32 28-30).
#: 2026-11-25 (fourteenth session), once the persistent kernel stopped spilling (slot_sum in
#: templates/module.cu.j2), 1- to 4-byte values went persistent too (PERSISTENT_TILES_MIN_BYTES),
#: on tiles that hold two sections in 48 KiB. H100, benchmarks/tune_single_pass.py
#: --persistent, % of copy at 2^22 / 2^24 / 2^26 / 2^28, classic -> persistent: float32
#: 256x32 classic 54.6/73.0/79.9/84.6; 128x32 54.4/72.2/80.5/83.5 -> 61.6/78.1/89.2/90.9
#: (an earlier run 57.9/79.6/86.0/90.8); 256x16 at 1536 threads 50.4/67.0/74.9/78.9 ->
#: 59.4/81.3/87.4/90.0. int32 256x32 classic 48.4/68.7/81.5/84.1; 128x32 54.5/74.2/81.2/83.3
#: -> 53.5/79.8/86.5/90.6 (60.1/80.4/87.6/90.7); 256x16 at 1536 51.2/68.2/77.5/80.0 ->
#: 56.3/78.5/88.6/90.8. int16 256x32 58.9/59.9/64.9 -> 70.0/74.5/77.3 at 2^24 / 2^26 / 2^28
#: (128x32 66.2/69.1/73.6, 256x16 58.9/59.6/62.7 persistent); int8 at 1024 threads, 256x16
#: 23.2/34.5/31.8 -> 26.3/36.5/34.5, 128x32 22.7/34.0/32.5 -> 25.8/36.8/37.5; float64 256x8
#: persistent 86.0/92.5/92.3, 128x16 85.0/91.5/93.7 (kept 256x8). Below 2^22 every
#: configuration took 10-20 us, launch-bound, in no order that repeats. H200, 2026-11-26
#: (nineteenth session), persistent, three rounds, % of copy at 2^26 / 2^28: float32 128x32
#: 77.9-81.2/82.3-83.1, 256x16 at 1536 threads 77.8-79.9/80.0-82.7; int32 77.8-81.4/
#: 80.6-83.0 and 79.4-81.1/81.8-82.8; 128x16 and 256x8 tiles 4-20 points lower (kept 128x32).
FAST_PATH = {
    1: TileShape(block_size=128, items_per_thread=32),
    2: TileShape(block_size=256, items_per_thread=32),
    4: TileShape(block_size=128, items_per_thread=32),
    8: TileShape(block_size=256, items_per_thread=8),
}


def fast_path(itemsize: int) -> TileShape:
    """The tile shape for ``itemsize``-byte values (wider values: fewer items per thread)."""
    if itemsize in FAST_PATH:
        return FAST_PATH[itemsize]
    return TileShape(block_size=256, items_per_thread=4)


#: Counting scans (ScanKernel counts=True: one bit per element, warp ballots), when the user
#: names no section. H200, 2026-11-23, Select(flags) of 2^26 float32, half kept, against a
#: copy of the same bytes (reduce_then_scan): 256x8 64.5%, 128x16 67.7%, 256x16 58.0%,
#: 128x8 63.6%; decoupled look-back at best 53.4% (256x16).
COUNTING = TileShape(block_size=128, items_per_thread=16)

#: Counting scans whose condition reads the values (Unique, RunLengthEncode: see
#: COUNTING_VALUES_TUNING), in one pass: tiles of 4096, so each look-back is paid for by
#: twice the elements, bound for 1024 threads per multiprocessor. H100, 2026-11-25, int32
#: runs of 4, Unique / RunLengthEncode in us at 2^24, 2^26, 2^28, two runs
#: (benchmarks/tune_counting.py; threads per multiprocessor after the @):
#: 128x16@1536 (COUNTING's) 90.0/236.8/829.0 and 105.5/488.6/792.4, 158.3/396.8/1260.2 and
#: 153.0/592.3/1260.6; 128x32@1024 88.3/222.5/739.7 and 91.0/216.0/731.2, 154.6/369.1/1216.1
#: and 165.1/356.7/1216.4; 256x16@1536 85.1/224.1/761.0 and 85.4/230.0/792.3,
#: 152.5/365.1/1223.0 and 184.0/418.4/1245.7; 256x16@1024 90.7/251.8/877.4 and
#: 91.6/248.9/870.0. In the first run only: 128x32@1536 97.3/280.1/944.3, 256x8@1536
#: 97.2/285.4/1047.2, 64x32@1024 91.4/241.6/812.5 (Unique).
COUNTING_VALUES = TileShape(block_size=128, items_per_thread=32)

#: Look-back tiles per lane (Tuning.lookback_tiles_per_lane) by the size of the scanned
#: value; others read one. H200, 2026-11-23, decoupled look-back, tuned tiles
#: (benchmarks/tune_single_pass.py --widths), % of copy at 2^24 / 2^28 for 1, 2, 3, 4 tiles:
#: float32 43.7/43.3, 44.3/45.1, 47.8/48.5, 47.7/50.1 (6: 45.6/48.4, 8: 42.1/44.5);
#: int32 35.5/36.1, 39.3/41.9, 45.6/45.2, 46.5/49.2; float64 59.0/59.7, 58.1/62.1,
#: 58.0/60.5, 56.2/58.1 (more registers for wider values under the same register bound).
#: Then with the FAST_PATH tiles (warp runs, 32 KiB tiles, 1024 threads/SM), % of copy at 2^24 /
#: 2^26 / 2^28 for 1, 2, 4, 8 tiles: float32 40.3/40.4/40.9, 60.5/67.3/68.4,
#: 59.4/64.2/66.6, 50.9/53.1/54.6; float64 61.2/68.7/69.0, 66.7/74.2/76.0, 64.8/69.4/71.4,
#: 53.0/58.2/58.8. 1- and 2-byte values keep 4 (measured with the earlier tiles only).
#: 2026-11-25, after a lane's reads were all put in flight before any is decoded (they had
#: waited for each other, see templates/tile/state.cuh.j2), persistent 8-byte tiles, % of
#: copy at 2^20 / 2^22 / 2^24 / 2^26 / 2^28 for 1 and 2 tiles: float64 51.5/74.0/79.2/84.2/
#: 85.4 and 48.8/69.2/75.6/81.0/81.4, int64 43.6/73.0/76.7/83.4/86.5 and 54.3/71.9/75.4/
#: 81.1/81.0 (the old reads at 1 tile: float64 78.7 at 2^24, 85.6 at 2^28: the same; wider
#: windows cost polling traffic, not round trips: 4 and 8 tiles fell to 76.0 and 53.6 at
#: 2^28). 4-byte values, 1 and 2 tiles: float32 54.0/46.5/62.3/68.8/71.0 and
#: 51.3/44.5/61.7/64.9/67.4, but int32 49.9/30.4/39.8/40.6/40.7 and 50.3/45.7/60.4/65.5/67.2
#: (int32 and uint32 at 1 tile spill 260 bytes a thread under the 64-register bound, float32
#: none: ptxas -v; as slow with the old reads). 2026-11-25 (eleventh session), once the
#: classic kernel's runs waited for the prefix in shared memory instead of registers (no
#: spills at either width), H100, % of copy at 2^22 / 2^24 / 2^26 / 2^28 for 1 and 2 tiles:
#: float32 56.8/71.3/80.4/84.1 and 55.5/69.1/77.8/80.6, int32 54.1/70.5/81.5/84.4 and
#: 52.0/68.3/76.5/81.4 (before, at 2 tiles: float32 77.7, int32 75.6 at 2^28). The same
#: session, 1, 2 and 4 tiles: int16 63.5, 60.1 and 53.9% at 2^28 (54.7, 53.2, 52.7 at 2^24),
#: int8 31.2, 30.9 and 25.8 (23.1, 22.4, 19.5). Every size now reads one tile a lane.
LOOKBACK_TILES_PER_LANE = {1: 1, 2: 1, 4: 1, 8: 1}

#: Tuning.tile_persistent_min_bytes by the size of what is scanned (acc_t); others: never.
#: H200, 2026-11-24 (benchmarks/tune_single_pass.py --persistent), % of copy at 2^20 / 2^22 /
#: 2^24 / 2^26 / 2^28, the earlier tuned tile (classic 256x16, 1100 ns first wait) ->
#: persistent 256x8 tiles polling at once: float64 53.7/57.2/65.6/74.7/76.8 -> 48.5/63.6/
#: 71.0/76.1/78.9; int64 44.0/59.5/67.3/74.9/76.4 -> 49.2/71.3/74.1/78.8/79.8 (polling
#: after 1100 ns: float64 .../74.4 at 2^28, worse). Below 16 MiB, us at 2^18 / 2^19 / 2^20
#: / 2^21 / 2^22 (median of 21, two rounds): float64 classic 256x16 10.0/9.6/10.9/16.3/35.6
#: and 13.3/13.4/13.7/17.3/39.0, classic 256x8 10.3/13.5/11.0/18.3/38.4, persistent 256x8
#: 9.9/9.6/10.5/14.8/31.5 and 12.9/12.3/10.8/14.9/30.2; int64 13.1/13.1/13.6/16.7/37.0,
#: 12.8/13.3/13.3/18.4/39.6, 13.1/13.5/13.5/15.9/31.0. The persistent kernel is never
#: slower, so 8-byte values take it at every size past one section. float32 and int32
#: persistent 256x16 tiles only matched the 256x32 classic ones at 2^24 to 2^28 (int32
#: 59.0/65.1/67.4 vs 61.8/65.2/69.2) and lost at 2^22 (38.8 vs 48.2): 4-byte values stay
#: classic. A look-ahead warp (one warp more per block finding prefixes while the others
#: open the next tile) was slower still: float64 2^28 58.8% against 80.9% without it.
#: 2026-11-25 (fourteenth session): those 4-byte persistent tiles spilled 116-532 bytes a
#: thread (ptxas -v; the loop over tiles hoisted every element's shared-memory address
#: into registers). Without the spills the persistent kernel wins for 1- to 4-byte values
#: too (FAST_PATH above has the sweep), so every size takes it past one section.
PERSISTENT_TILES_MIN_BYTES = {1: 0, 2: 0, 4: 0, 8: 0}

#: Tuning.auto_reduce_then_scan_min_bytes by the size of the value. H200, 2026-11-23, with the
#: FAST_PATH tiles, decoupled look-back against reduce_then_scan
#: (benchmarks/tune_single_pass.py --strategy), us: float32 17.8 vs 20.7 at 2^22, 37.4 vs
#: 43.3 at 2^23, 66.7 vs 75.4 at 2^24, 205 vs 223 at 2^26, 760 vs 821 at 2^28; float64 35.6
#: vs 40.7, 62.8 vs 71.9, 104 vs 124, 346 vs 418, 1321 vs 1582. The single pass wins at
#: every size, so auto never leaves it (below 1 TiB) for 4- and 8-byte values. 2-byte values
#: on their 256x32 tiles (2026-11-24, % of copy at 2^24 / 2^26 / 2^28): int16 single pass
#: 40.0/43.0/42.8, reduce_then_scan at best 40.8/39.3/41.4 (on 256x16 tiles; 29% on 256x32).
#: 1-byte values (2026-11-25, H100, the persistent 128x32 tiles of FAST_PATH): int8 auto,
#: which was reduce_then_scan from 16 MiB, 18.3/26.1/26.5% of copy at 2^24 / 2^26 / 2^28
#: (python -m scangen bench), the persistent single pass 25.8/36.8/37.5 (tune_single_pass.py).
AUTO_REDUCE_THEN_SCAN_MIN_BYTES = {1: 1 << 40, 2: 1 << 40, 4: 1 << 40, 8: 1 << 40}
#: For other value sizes (not measured since 2026-11-21, when float32 and float64 look-back
#: won at 2^20 and lost from 2^22 or 2^24).
DEFAULT_REDUCE_THEN_SCAN_MIN_BYTES = 16 << 20

#: Tuning.tile_min_threads_per_sm by the size of what is scanned (acc_t); others: the
#: default. H200, 2026-11-23, decoupled look-back, warp runs, % of copy at 2^24 / 2^28 for
#: 1024 and 1536 threads: int8 13.7/17.1, 16.9/20.7; int16 34.4/32.5, 37.0/37.1 (256x16
#: tiles; its 256x32 tiles measured best at 1024, under FAST_PATH above, as did float32
#: and float64). 1-byte values: 1024 on their persistent 128x32 tiles (FAST_PATH; 2026-11-25).
TILE_MIN_THREADS_PER_SM = {1: 1024, 2: 1024, 4: 1024, 8: 1024}
DEFAULT_TILE_MIN_THREADS_PER_SM = 1536

#: Shared memory one block may use, static and dynamic together, once its kernel opts in
#: (cudaFuncAttributeMaxDynamicSharedMemorySize; the device reports it as
#: MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), by architecture: the CUDA C++ Programming Guide's
#: table of technical specifications per compute capability. Without the opt-in a block
#: has 48 KiB (scangen.spec.MAX_STATIC_SHARED_BYTES) on all of them.
MAX_SHARED_BYTES_OPTIN = {
    "sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024,
    "sm_80": 163 * 1024, "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024,
    "sm_90": 227 * 1024, "sm_100": 227 * 1024, "sm_120": 99 * 1024,
}

#: The architecture scangen is tuned on (Hopper) and checks against without a GPU: a spec
#: is refused when it needs more shared memory than a block of it may opt in to, and
#: ``check_compile`` compiles for it. On a device with less (MAX_SHARED_BYTES_OPTIN), the
#: first launch refuses what does not fit, naming the device's limit.
DEFAULT_ARCH = "sm_90"


def max_shared_bytes(arch: str = DEFAULT_ARCH) -> int:
    """Shared memory a block of ``arch`` may opt in to (MAX_SHARED_BYTES_OPTIN)."""
    return MAX_SHARED_BYTES_OPTIN[arch]


#: The algorithm used when the user names none.
DEFAULT_ALGORITHM = "warp_shuffle"

#: Section size for algorithms other than the fast path when the user names none.
DEFAULT_SECTION_SIZE = 1024


@dataclass(frozen=True)
class Tuning:
    """Knobs rendered into the kernels or used by ``auto``; part of every spec."""

    #: ``strategy="auto"`` above one section: decoupled look-back (one launch) below this many
    #: input bytes, reduce_then_scan (three passes, but each at higher bandwidth) from here on.
    #: None: by value size, from AUTO_REDUCE_THEN_SCAN_MIN_BYTES.
    auto_reduce_then_scan_min_bytes: int | None = None
    #: Polling back-off of the single-pass strategies: __nanosleep starts here and doubles
    #: per unsuccessful poll up to the maximum. The back-off made no measurable difference.
    backoff_min_ns: int = 8
    backoff_max_ns: int = 256
    #: A look-back first sleeps this long before its first poll, so the predecessors it is
    #: about to read have had time to publish, and fewer polls load the L2 while tiles
    #: stream in (CUB's sm90 float32 scan waits 1140 ns, then polls every 688 ns). 0: poll
    #: at once. H200, 2026-11-23 (benchmarks/tune_single_pass.py --first-wait --waits), % of
    #: copy at 2^26 / 2^28 for 0, 400, 800, 1100, 1600, 2400 ns: float32 49.9/50.8,
    #: 51.5/51.9, 51.3/52.8, 52.0/53.3, 52.1/53.7, 51.4/53.1; float64 61.4/62.2, 63.5/64.2,
    #: 65.0/65.1, 65.6/66.0, 66.9/66.4, 65.0/65.8. At 2^22 (one wave of tiles) it costs about
    #: the wait: float32 21.8 -> 22.9 us, float64 36.0 -> 37.4 us.
    lookback_first_wait_ns: int = 1100
    #: Tiles each lane of the decoupled look-back's warp reads per poll: a window of 32 x
    #: this many tiles, all read at once, so a look-back whose nearest published prefix is
    #: far back (hundreds of tiles run at once) needs fewer round trips. None: by value
    #: size, from LOOKBACK_TILES_PER_LANE.
    lookback_tiles_per_lane: int | None = None
    #: The single-pass kernel asks the compiler (second __launch_bounds__ argument) to leave
    #: registers for this many threads per multiprocessor. H200, 2026-11-23, warp runs,
    #: % of copy at 2^28 for 512, 768, 1024 threads: float32 256x32 55.5, 61.6, 67.8;
    #: float64 256x16 72.6, 73.2, 76.5 (at 1536 threads 128x32 float32 fell to 28%: spills).
    #: Earlier, staged 256x16 float32 tiles: unconstrained 47%, 1536 threads 50%, 2048 41%.
    #: None: by value size, from TILE_MIN_THREADS_PER_SM.
    tile_min_threads_per_sm: int | None = None
    #: Single-pass tile status of values of 5 to 8 bytes: True packs each value with its
    #: epoch and flag in one 16-byte word, read and written with one relaxed vector access
    #: (one round trip per poll, as CUB's ScanTileState does for 8-byte values); False keeps
    #: a 32-bit flag word and separate value slots (acquire the flag, then load the value).
    #: H200, 2026-11-23, decoupled look-back, float64 add, 256x8 tile
    #: (benchmarks/tune_single_pass.py --status-16): 2^28 47.7% -> 59.7% of copy, 2^24
    #: 45.6% -> 56.8% (at 256 threads/SM: 42.1% -> 60.6%).
    status_16_byte_words: bool = True
    #: Single-pass tiles of the warp_shuffle algorithm (whole warps): True moves data
    #: warp by warp (coalesced loads, a transpose through the warp's own shared memory into
    #: per-lane runs scanned in registers; one block barrier for the warp totals, as CUB's
    #: BLOCK_LOAD_WARP_TRANSPOSE with warp scans); False stages the section in shared memory
    #: and runs the block scan (three barriers more). H200, 2026-11-23, decoupled look-back
    #: (benchmarks/tune_single_pass.py --warp-runs), % of copy at 2^24 / 2^28, staged ->
    #: warp runs at 1024 threads/SM: float32 256x16 51.2/54.2 -> 53.5/55.8, 128x32
    #: 44.9/44.6 -> 57.4/66.6; float64 256x8 58.7/63.8 -> 60.4/65.0, 128x16 63.0/68.5 ->
    #: 66.1/76.1. The larger tiles win with runs in registers, not staged.
    tile_warp_runs: bool = True
    #: The single pass runs persistent blocks from this many bytes of scanned values (acc_t)
    #: on (0: always): as many blocks as fit on the device at once, each taking tile after
    #: tile by ticket and holding two, so that its next tile is loaded, scanned and its total
    #: published before its current one looks back. Every ticketed tile then publishes
    #: without waiting on anyone, and a look-back finds its predecessors published a tile
    #: earlier instead of still loading. The module then holds a second section in shared
    #: memory. None: by value size, from PERSISTENT_TILES_MIN_BYTES (absent: never).
    tile_persistent_min_bytes: int | None = None
    #: reduce_then_scan's first pass over a mask (a counting module whose input is a
    #: kernel.MaskInput, as Select's flags: KernelSpec.counted_mask): consecutive
    #: sections each block counts from 16-byte loads of the mask, all in flight together.
    #: H200, 2026-11-26 (benchmarks/tune_counting.py --select --mask-sections), Select(flags)
    #: of float32, half kept, reduce_then_scan, us at 2^26 / 2^28 in two rounds: by ballots
    #: (before) 191.4, 193.2 / 654.2, 631.3; 16-byte loads, 1 section a block 194.7, 189.5 /
    #: 651.0, 649.9; 2: 192.6, 181.6 / 616.9, 643.5; 4: 188.5, 182.0 / 620.8, 609.5; 8: 193.5,
    #: 185.6 / 596.6, 620.1; 16: 192.7, 187.1 / 597.2, 618.9. Nsight Compute, the first pass
    #: alone at 2^26: by ballots 31.9 us, 1 section a block 28.1, 4 sections 21.2 (68% of
    #: DRAM peak, from 46%).
    mask_sections_per_block: int = 4

    def __post_init__(self):
        width = self.lookback_tiles_per_lane
        if width is not None and (not isinstance(width, int) or not 1 <= width <= 32):
            raise ValueError(f"Tuning.lookback_tiles_per_lane must be None or an int from 1 "
                             f"to 32, not {width!r}")
        per_block = self.mask_sections_per_block
        if not isinstance(per_block, int) or isinstance(per_block, bool) or \
                not 1 <= per_block <= 16:
            raise ValueError(f"Tuning.mask_sections_per_block must be an int from 1 to 16, "
                             f"not {per_block!r}")
        persistent = self.tile_persistent_min_bytes
        if persistent is not None and (not isinstance(persistent, int)
                                       or isinstance(persistent, bool) or persistent < 0):
            raise ValueError(f"Tuning.tile_persistent_min_bytes must be None or an int >= 0, "
                             f"not {persistent!r}")

    def reduce_then_scan_min_bytes(self, itemsize: int) -> int:
        """Input bytes from which ``auto`` takes reduce_then_scan, for itemsize-byte values."""
        return _by_size(self.auto_reduce_then_scan_min_bytes, AUTO_REDUCE_THEN_SCAN_MIN_BYTES,
                        itemsize, DEFAULT_REDUCE_THEN_SCAN_MIN_BYTES)

    def persistent_min_bytes(self, acc_itemsize: int) -> int | None:
        """Bytes of acc_itemsize-byte values from which the single pass is persistent (None:
        never)."""
        return _by_size(self.tile_persistent_min_bytes, PERSISTENT_TILES_MIN_BYTES,
                        acc_itemsize, None)

    def lookback_width(self, acc_itemsize: int) -> int:
        """Tiles per lane of the look-back of acc_itemsize-byte values."""
        return _by_size(self.lookback_tiles_per_lane, LOOKBACK_TILES_PER_LANE, acc_itemsize, 1)

    def tile_min_blocks(self, block_size: int, acc_itemsize: int) -> int:
        """Blocks per multiprocessor for tile_min_threads_per_sm (CUDA allows 1 to 32)."""
        threads = _by_size(self.tile_min_threads_per_sm, TILE_MIN_THREADS_PER_SM,
                           acc_itemsize, DEFAULT_TILE_MIN_THREADS_PER_SM)
        return min(32, max(1, threads // block_size))


def _by_size(named, table: dict, itemsize: int, default):
    """A Tuning field's value: the one the user named, else the measured one for values of
    itemsize bytes, else ``default``."""
    if named is not None:
        return named
    return table.get(itemsize, default)


DEFAULT_TUNING = Tuning()

#: Counting scans (ScanKernel counts=True) when the user names no tuning: auto leaves the
#: single pass from 256 MiB of counts (n = 2^25) on, and the single-pass kernel is bound for
#: 1536 threads per multiprocessor. Select(flags) of float32, half kept, on COUNTING tiles,
#: single pass against reduce_then_scan, us: H200 (2026-11-25) 90.0 / 111.6 at 2^24, 231.3 /
#: 199.7 at 2^26; H100 (2026-11-25, benchmarks/tune_counting.py --select) 83.3 / 86.1 at
#: 2^24, 243.2 / 228.4 at 2^26, 862.3 / 774.5 at 2^28 (2^22: 36.1 / 37.0; on 128x32@1024
#: tiles 82.2 / 84.2, 230.4 / 234.8, 812.8 / 793.4). It had switched from 16 MiB (n = 2^21),
#: chosen from one H200 run at 2^26. The plain scans' tables above were measured on values,
#: not ballots.
COUNTING_TUNING = Tuning(auto_reduce_then_scan_min_bytes=256 << 20,
                         tile_min_threads_per_sm=1536)

#: Counting scans whose condition reads the values themselves (Unique and RunLengthEncode:
#: does x[i] equal x[i - 1]?): auto keeps the single pass at every size. reduce_then_scan evaluates
#: the condition in both of its passes, so it reads the values twice, where Select's flags
#: cost it one byte an element. H100, 2026-11-25 (int32, runs of 4; auto on COUNTING_TUNING
#: against the single pass, us at 2^24 / 2^26 / 2^28, one run): Unique 98.4/251.7/869.0 ->
#: 85.8/233.9/803.1, RunLengthEncode 167.3/398.0/1356.8 -> 148.5/370.1/1308.8; Select(flags)
#: the other way, 96.5/235.5/794.5 -> 93.9/250.8/895.2. Nsight Compute, Unique at 2^26: the
#: single pass 209.5 us, reduce_then_scan 90 + 125 us (+ 12 for its inner levels). The
#: single pass here runs on COUNTING_VALUES tiles, for 1024 threads per multiprocessor.
COUNTING_VALUES_TUNING = Tuning(auto_reduce_then_scan_min_bytes=1 << 62,
                                tile_min_threads_per_sm=1024)
