"""A numpy interpreter of primitives' plans (scangen.modules.ModulePlan): it runs each step on
the host, doing what each kernel's comments promise (templates/kernels/radix_*.cuh.j2,
templates/histogram.cu.j2, templates/run_lengths.cu.j2, templates/segment_heads.cu.j2, and
the scans a plan runs between them), so that a plan's structure (which buffers each launch
reads and writes, in which order, what is zeroed first, which pass lands where) can be
checked against numpy with no GPU. The kernels themselves are the GPU tests' job.

What it checks while running (AssertionError otherwise):

* every launch's entry point is in its module, its arguments are given by name, once each,
  a buffer or NULL for a pointer and a value for a scalar (scangen.modules.named_arguments);
  its grid is within CUDA's limit, its block is the module's;
* every buffer is an array of the call or a temporary of the plan, read and written inside
  its bytes; temporaries start as random bytes (as the GPU leaves them), the persistent
  ones (ticket, tile status) zeroed when first made and kept between calls of a machine;
* the single-pass launches: each takes ``grid`` tickets from a counter that keeps
  counting from call to call, starting where the runtime says (``ticket_base``), with a
  new epoch each, and the status holds a word per (tile, digit) of the launch.
"""
from __future__ import annotations

import functools

import numpy as np

from scangen.args import C_SCALARS
from scangen.modules import Checkpoint, ScanCall, named_arguments
from scangen.strategies.base import MAX_GRID, NULL, BufferArg, RuntimeArg

from . import digits as key_digits
from .plan_machine import ScanHooks, run_plan


class ModuleMachine:
    """One stream's device: runs primitives' plans, keeping the persistent temporaries and
    the ticket counter between calls as the runtime does."""

    def __init__(self, rng):
        self.rng = rng
        self.persistent = {}
        self.ticket = 0
        self.epoch = 0
        #: Per call: (entry point or scan title, grid) of every step run.
        self.ran = []

    def run(self, plan, arrays: dict, values: dict | None = None) -> dict:
        """Run every step of ``plan`` with ``arrays`` (name -> numpy array, the call's)
        and ``values`` (the call's RuntimeArg values); return the buffers."""
        self.ran = []
        self.values = dict(values or {})
        buffers = dict(arrays)  # an array bound to None is passed as NULL
        for temp in plan.temporaries:
            assert temp.name not in buffers, f"temporary {temp.name} shadows an array"
            if temp.persistent:
                held = self.persistent.get(temp.name)
                if held is None or held.size < temp.nbytes:
                    held = self.persistent[temp.name] = np.zeros(temp.nbytes, np.uint8)
                buffers[temp.name] = held
            else:
                buffers[temp.name] = self.rng.integers(0, 256, temp.nbytes, dtype=np.uint8)
        self.buffers = buffers
        self.plan = plan
        for name, nbytes in plan.zeroed:
            self._bytes(name, 0, nbytes)[:] = 0
        for step in plan.steps:
            if isinstance(step, ScanCall):
                self._scan(step)
            elif isinstance(step, Checkpoint):
                self.ran.append((f"checkpoint {step.name}", 0))
            else:
                self._launch(step)
        return buffers

    # -- binding ----------------------------------------------------------------------------

    def _bytes(self, name, offset, nbytes=None) -> np.ndarray:
        array = self.buffers[name]
        raw = array.reshape(-1).view(np.uint8)
        end = raw.size if nbytes is None else offset + nbytes
        assert 0 <= offset and end <= raw.size, \
            f"{name}[{offset}:{end}] is outside its {raw.size} bytes"
        return raw[offset:end]

    def _view(self, value, dtype):
        if value is NULL:
            return None
        assert isinstance(value, BufferArg), value
        assert value.name in self.buffers, f"no buffer {value.name!r}"
        if self.buffers[value.name] is None:
            return None
        raw = self._bytes(value.name, value.offset)
        dtype = np.dtype(dtype)
        return raw[:raw.size // dtype.itemsize * dtype.itemsize].view(dtype)

    def _bind(self, parameters, args, types: dict) -> dict:
        bound = {}
        for parameter, (name, value) in zip(parameters, args):
            if parameter.pointer:
                assert parameter.c_type in types, f"{name}: what is a {parameter.c_type}?"
                bound[name] = self._view(value, types[parameter.c_type])
            elif isinstance(value, RuntimeArg):
                assert value.name in self.runtime, f"<{value.name}> is not supplied"
                bound[name] = self.runtime[value.name]
            else:
                bound[name] = value
        return bound

    # -- steps ------------------------------------------------------------------------------

    def _launch(self, launch):
        entry = launch.kernel
        module = entry.module
        what = f"{entry.name}<<<{launch.grid}>>>"
        assert entry.name in dict(module.entry_points()), what
        assert named_arguments(entry, dict(launch.args)) == launch.args, \
            f"{what}: arguments not in the entry point's order"
        assert 1 <= launch.grid <= MAX_GRID, what
        assert launch.block == module.block_size if hasattr(module, "block_size") else True
        self.runtime = dict(self.values)
        if any(isinstance(v, RuntimeArg) and v.name == "ticket_base" for _, v in launch.args):
            self.epoch += 1
            self.runtime.update(ticket_base=self.ticket, epoch=self.epoch)
        bound = self._bind(entry.parameters, launch.args, _c_types(module))
        getattr(self, entry.name)(module, launch, **bound)
        self.ran.append((entry.name, launch.grid))

    def _scan(self, call):
        self.runtime = dict(self.values)
        #: The scan running (its model may read its kernel and initial value).
        self.call = call
        bound = self._bind(call.parameters, call.args,
                           {**C_SCALARS, "scan_t": call.kernel.dtype})
        SCANS[call.name](self, call.n, **bound)
        self.ran.append((call.name, call.n))

    # -- radix passes (kernels/radix_digit_counts.cuh.j2, radix_onesweep.cuh.j2) -------------

    def radix_digit_counts(self, module, launch, keys, counts, n, first_shift, passes,
                           end_bit, flip):
        """Adds each pass's count of every digit (atomics: counts must start zeroed)."""
        for number in range(passes):
            shift = first_shift + number * module.radix_bits
            bits = max(0, min(module.radix_bits, end_bit - shift))
            digit = key_digits(keys[:n], shift, bits, flip != 0).astype(np.int64)
            counts[number * module.radix:(number + 1) * module.radix] += np.bincount(
                digit, minlength=module.radix).astype(np.uint64)

    def radix_onesweep(self, module, launch, keys, keys_out, digit_counts, portion_in,
                       portion_out, ticket, ticket_base, status, epoch, first_tile, n, shift,
                       mask, flip, values=None, values_out=None):
        """Tiles first_tile .. + grid of a pass: each key (and value; its index for
        argsort's first pass) to where its digit starts in the portion plus its stable rank
        among the portion's keys of that digit; the portion's last tile writes where each
        digit starts in the next portion."""
        grid, tile = launch.grid, module.tile_size
        assert ticket_base == self.ticket, "tickets start where the last launch left them"
        self.ticket += grid
        assert status.size >= grid * module.radix * 8, "a status word per (tile, digit)"
        assert (values is None) == (values_out is None) or module.index_values
        begin, end = first_tile * tile, min(n, (first_tile + grid) * tile)
        assert begin < end <= n, f"tiles {first_tile}..+{grid} cover no keys of {n}"
        digit = key_digits(keys[begin:end], shift, int(mask).bit_length(), flip != 0)
        digit = digit.astype(np.int64)
        if first_tile == 0:
            counts = digit_counts[:module.radix].astype(np.int64)
            start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        else:
            start = portion_in[:module.radix].copy()
        order = np.argsort(digit, kind="stable")
        rank = np.empty(end - begin, np.int64)
        sorted_digit = digit[order]
        first_of = np.searchsorted(sorted_digit, sorted_digit)
        rank[order] = np.arange(end - begin) - first_of
        dest = start[digit] + rank
        keys_out[dest] = keys[begin:end]
        if values_out is not None:
            moved = np.arange(begin, end) if values is None else values[begin:end]
            values_out[dest] = moved
        here = np.bincount(digit, minlength=module.radix)
        portion_out[:module.radix] = start + here

    # -- radix_digit_offsets (kernels/radix_tile_places.cuh.j2, radix_places.cuh.j2) --------

    def radix_tile_counts(self, module, launch, keys, tile_counts, digits, n, shift, mask,
                          flip):
        """Each tile's count of every digit, digit-major (tile t's digit d at d * tiles +
        t), and each key's digit."""
        tiles = launch.grid
        assert tiles == -(-n // module.tile_size), "a block per tile"
        digit = key_digits(keys[:n], shift, int(mask).bit_length(), flip != 0).astype(np.int64)
        tile = np.arange(n) // module.tile_size
        tile_counts[:module.radix * tiles] = np.bincount(
            digit * tiles + tile, minlength=module.radix * tiles)
        digits[:n] = digit

    def radix_tile_places(self, module, launch, digits, tile_bases, dest, digit_start, n):
        """Each key's place: its tile's base for its digit plus its rank among its tile's
        keys of that digit; tile 0's bases are where each digit starts."""
        tiles = launch.grid
        assert tiles == -(-n // module.tile_size), "a block per tile"
        digit = digits[:n].astype(np.int64)
        tile = np.arange(n) // module.tile_size
        key = digit * tiles + tile
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - np.searchsorted(sorted_key, sorted_key)
        dest[:n] = tile_bases[key] + rank
        digit_start[:module.radix] = tile_bases[np.arange(module.radix) * tiles]

    def radix_places_from_order(self, module, launch, order, dest, n):
        dest[order[:n]] = np.arange(n)

    def radix_digit_starts(self, module, launch, sorted, digit_start, n, shift, mask, flip):
        """Where each digit starts among keys in order of the digit."""
        digit = key_digits(sorted[:n], shift, int(mask).bit_length(), flip != 0)
        assert np.all(digit[1:] >= digit[:-1]), "the keys are not in order of the digit"
        digit_start[:mask + 1] = np.searchsorted(digit, np.arange(mask + 1))

    # -- histogram (histogram.cu.j2) and run lengths (run_lengths.cu.j2) ---------------------

    def histogram_counts(self, module, launch, x, edges, counts, n, bins, low, high, span,
                         scale_in_bins, margin_in_bins):
        """Adds each value's bin, as numpy.histogram bins with these edges (counts must
        start zeroed)."""
        assert span == high - low and scale_in_bins == bins / (high - low)
        assert edges[0] == np.asarray(low, edges.dtype) and edges.size == bins + 1
        counts[:bins] += np.histogram(x[:n], edges[:bins + 1])[0]

    def run_lengths(self, module, launch, starts, counts, runs, end):
        total = int(runs[0])
        bounds = np.append(starts[:total], end)
        counts[:total] = np.diff(bounds)

    # -- segment heads from offsets (segment_heads.cu.j2) -------------------------------------

    def segment_heads(self, module, launch, offsets, heads, verdict, offset_count, n):
        """Bit offsets[k] of heads (bit i % 32 of word i / 32) set for each of the call's
        offsets in [0, n) (the rest of heads is left as it was: the plan must have zeroed
        it); where a verdict is bound, it becomes 1 if the offsets break the CSR rules and
        is left as it was if not."""
        assert offset_count <= offsets.size, "offset_count is past the offsets"
        starts = offsets[:offset_count].astype(np.int64)
        inside = starts[(starts >= 0) & (starts < n)]
        np.bitwise_or.at(heads, inside >> 5, np.left_shift(1, inside & 31).astype(np.uint32))
        if verdict is not None and (starts[0] != 0 or starts[-1] != n or
                                    np.any(np.diff(starts) < 0)):
            verdict[0] = 1


def _c_types(module) -> dict:
    """The numpy dtype of each C type a module's parameters point to."""
    types = {**C_SCALARS, "void": np.dtype(np.uint8)}
    if hasattr(module, "key_dtype"):
        types["radix_key_t"] = module.key_dtype
        if getattr(module, "value_dtype", None) is not None:
            types["radix_value_t"] = module.value_dtype
    if hasattr(module, "edge_dtype"):
        types.update(histogram_value_t=module.dtype, edge_t=module.edge_dtype)
    return types


def _tile_bases(machine, n, tile_counts):
    """radix digit offsets' scan: each count becomes the sum of the counts before it."""
    counts = tile_counts[:n].copy()
    tile_counts[:n] = np.concatenate([[0], np.cumsum(counts)[:-1]])


def _run_heads(machine, n, x, values, starts, count):
    """run_length_encode's heads scan: each run's value and first index, and the runs."""
    heads = np.ones(n, bool)
    heads[1:] = x[1:n] != x[:n - 1]
    first = np.flatnonzero(heads)
    values[:first.size] = x[first]
    starts[:first.size] = first
    count[0] = first.size


def _segmented_by_head_bits(machine, n, x, heads, out, *, mode):
    """SegmentedScan's scan by head bits: its own plan run on the scan plan interpreter
    (tests.support.plan_machine), with the heads the machine holds (as one flag an
    element) and the initial value the runtime passes (the call's, else the kernel's)."""
    call = machine.call
    kernel = call.kernel
    assert not kernel.scan_module.hooks.reverse, "the scan plan interpreter scans forward"
    initial = None
    if call.initial is not None:
        initial = machine.values.get(call.initial.name)
        initial = kernel.initial if initial is None else initial
    flags = np.unpackbits(heads.view(np.uint8), bitorder="little")[:n].astype(bool)
    out[:n] = run_plan(kernel.plan(n), ScanHooks(x[:n], mode, heads=flags,
                                                 initial=initial), machine.rng)


#: What the scans a plan runs between launches do, by their title.
SCANS = {"radix digit offsets: tile bases": _tile_bases,
         "run_length_encode heads": _run_heads,
         **{f"segmented {mode} scan by head bits":
            functools.partial(_segmented_by_head_bits, mode=mode)
            for mode in ("inclusive", "exclusive")}}


__all__ = ["ModuleMachine", "SCANS"]
