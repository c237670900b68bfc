"""A numpy interpreter of scangen plans: it runs a Plan's launches on the host, doing what
each kernel body does (templates/kernels/*.cuh.j2 over templates/tile/section.cuh.j2 and
templates/io.cuh.j2), so that a plan's structure and operand order can be checked against a
reference with no GPU. The device-side protocols (barriers, look-back, memory ordering) are
the GPU tests' job; this checks what the plan asks the kernels to do.

What it emulates:

* every section kernel loads section s = [s*S, (s+1)*S) of its io's input (blocks run
  section blockIdx.x; scan_tiles blocks the section of their ticket), padded with the
  identity past n, and block-scans it inclusively (a sequential left fold: the definition);
* ``item`` / ``prev_item`` combine the section's prefix on the LEFT (``seed``), none for the
  first section; ``last_item`` is what the kernel passes (the section total for
  scan_one_section, prefixes[gridDim.x] for add_prefixes / scan_seeded, nothing usable for
  scan_tiles);
* the "user" io runs a Python model of the ScanKernel's hooks (``ScanHooks``,
  ``RecordHooks``); the "totals" io reads values[i] and writes values[i] = prev_item;
* a segmented spec combines (value, head) pairs as module.cu.j2's acc_combine does, and the
  user io gives the output the identity as prev_item at a segment start;
* an initial value (hooks with ``initial``) is combined on the left of item, prev_item and
  last_item by the user io, as io.cuh.j2 does (so each segment starts from it);
* the single-pass state: tickets taken in a random block order from a counter that keeps
  counting from call to call (a machine is one stream's scratch), the runtime's ticket base
  and epoch; a persistent launch runs any number of blocks up to its grid, each taking
  tickets in a random interleaving until one finds no tile left.

What it checks while running (AssertionError otherwise):

* every launch's kernel is in the module, its arguments fit the family's parameters
  (buffers are temporaries of the plan, NULL only for the packed statuses' value slots, the
  runtime scalars by name, a count), its block is the spec's, its grid within CUDA's limit;
* every access is inside its buffer (user arrays are exactly n long; temporaries exactly as
  large as the plan says, and start as random bytes, as the GPU leaves them);
* blocks of one launch see memory as it was at the launch, no element is written by two
  blocks of one launch, and no block reads what another block of the same launch writes
  (that would be a race on the GPU);
* the output statement runs exactly once for each i in [0, n) per call;
* single pass: the tiles taken are exactly 0 .. grid-1 (anything else deadlocks or reads
  outside the array), the state temporaries are persistent and large enough, and the ticket
  counter ends where the runtime will start the next call (Launch.tickets).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from scangen.plan import NULL, USER_ARGS, BufferArg, RuntimeArg
from scangen.strategies.base import MAX_GRID

from . import poison_values, twin

_TICKET_MODULUS = 2**64
_EPOCH_LIMIT = 1 << 30


# --- values --------------------------------------------------------------------------------

class Acc:
    """acc_t: what the machinery combines, the value or a segmented (value, head) pair."""

    def __init__(self, spec):
        self.spec = spec
        self.op = spec.operator
        self.combine_twin = twin(self.op)  # the tests' numpy twin, not the library's
        self.value_dtype = spec.etype.dtype
        self.segmented = spec.segmented
        self.value_identity = spec.etype.numpy_value(self.op.identity_for(spec.etype))
        if self.segmented:
            size = self.value_dtype.itemsize
            self.dtype = np.dtype({"names": ["value", "head"], "formats": [self.value_dtype, "u1"],
                                   "offsets": [0, size], "itemsize": spec.acc_itemsize})
        else:
            self.dtype = self.value_dtype
        assert self.dtype.itemsize == spec.acc_itemsize, (self.dtype, spec.acc_itemsize)

    def identity(self, shape=()):
        out = np.empty(shape, self.dtype)
        if self.segmented:
            out["value"], out["head"] = self.value_identity, 0
        else:
            out[...] = self.value_identity
        return out

    def _op(self, a, b):
        # Operands of one shape: the struct operators' references build their result from
        # one operand's shape.
        a, b = np.broadcast_arrays(np.asarray(a, self.value_dtype), np.asarray(b, self.value_dtype))
        with np.errstate(all="ignore"):
            return np.asarray(self.combine_twin(a, b)).astype(self.value_dtype, copy=False)

    def combine(self, a, b):
        """a op b, a the earlier operand (acc_combine)."""
        if not self.segmented:
            return self._op(a, b)
        value = np.where(b["head"] != 0, b["value"], self._op(a["value"], b["value"]))
        out = np.empty(value.shape, self.dtype)
        out["value"], out["head"] = value, a["head"] | b["head"]
        return out

    def pack(self, values, heads):
        if not self.segmented:
            assert heads is None
            return np.asarray(values, self.dtype)
        out = np.empty(np.shape(values), self.dtype)
        out["value"], out["head"] = values, np.asarray(heads, bool)
        return out

    def value(self, acc):
        return acc["value"] if self.segmented else acc

    def after(self, first, values):
        """``first op values[k]`` for every k: a value combined on the left of each."""
        return self._op(first, values)


# --- the hooks of the user io, modelled in numpy -------------------------------------------

class _InputHooks:
    """What both models read: ``input_expr`` ``x[i]`` and, for segments,
    ``is_segment_start_expr`` ``heads[i] != 0``."""

    x: np.ndarray
    heads = None

    def with_heads(self, memory: dict) -> dict:
        """``memory`` with the segment heads added, where there are any."""
        if self.heads is not None:
            memory["heads"] = np.asarray(self.heads, np.uint8).copy()
        return memory

    def input(self, ctx, idx, blocks):
        return ctx.read("x", idx, blocks)

    def segment_start(self, ctx, idx, blocks):
        return ctx.read("heads", idx, blocks) != 0


class ScanHooks(_InputHooks):
    """scangen.Scan's hooks: input ``x[i]``; output ``out[i] = item;`` (inclusive) or
    ``out[i] = prev_item;`` (exclusive). ``in_place``: out is x (Scan's ``out=x``).
    SegmentedScan's and Scan's rows: ``heads`` (segments start where it is nonzero) and
    ``initial`` (the value every segment starts from)."""

    def __init__(self, x, mode, *, in_place=False, heads=None, initial=None):
        assert mode in ("inclusive", "exclusive")
        self.x, self.mode, self.in_place = np.asarray(x), mode, in_place
        self.heads, self.initial = heads, initial

    def memory(self, rng):
        x = self.x.copy()
        out = x if self.in_place else poison_values(rng, x.dtype, x.size)
        return self.with_heads({"x": x, "out": out})

    def output(self, ctx, idx, blocks, item, prev_item, last_item):
        ctx.write("out", idx, item if self.mode == "inclusive" else prev_item, blocks)

    def result(self, memory):
        return memory["out"]


class RecordHooks(_InputHooks):
    """A ScanKernel whose output records what it is given::

        items[i] = item; prevs[i] = prev_item; lasts[i] = last_item;

    (``lasts`` only when ``last_item`` is set; ``heads``: the segment starts, read by an
    ``is_segment_start_expr`` of ``heads[i] != 0``)."""

    def __init__(self, x, *, heads=None, last_item=True):
        self.x, self.heads, self.last_item = np.asarray(x), heads, last_item

    def memory(self, rng):
        n, dtype = self.x.size, self.x.dtype
        memory = {"x": self.x.copy(), "items": poison_values(rng, dtype, n),
                  "prevs": poison_values(rng, dtype, n)}
        if self.last_item:
            memory["lasts"] = poison_values(rng, dtype, n)
        return self.with_heads(memory)

    def output(self, ctx, idx, blocks, item, prev_item, last_item):
        ctx.write("items", idx, item, blocks)
        ctx.write("prevs", idx, prev_item, blocks)
        if self.last_item:
            ctx.write("lasts", idx, last_item, blocks)

    def result(self, memory):
        names = ("items", "prevs", "lasts") if self.last_item else ("items", "prevs")
        return {name: memory[name] for name in names}


# --- memory seen by one launch ---------------------------------------------------------------

class LaunchMemory:
    """Accesses of one launch: reads see memory as at the launch; writes are checked for
    elements written twice and for reads of another block's writes at the end."""

    def __init__(self, buffers: dict, what: str):
        self.buffers, self.what = buffers, what
        self.before = {}
        self.reads = defaultdict(list)
        self.writes = defaultdict(list)

    def _buffer(self, name, idx):
        assert name in self.buffers, f"{self.what}: no buffer {name!r}"
        array = self.buffers[name]
        idx = np.asarray(idx, np.int64)
        if idx.size:
            assert idx.min() >= 0 and idx.max() < array.size, (
                f"{self.what}: {name}[{idx.min()}..{idx.max()}] is outside its "
                f"{array.size} elements")
        return id(array), array, idx  # aliases (an in-place scan) are one buffer

    def read(self, name, idx, blocks):
        key, array, idx = self._buffer(name, idx)
        self.reads[key].append((name, idx, np.broadcast_to(blocks, idx.shape)))
        return self.before.get(key, array)[idx]

    def write(self, name, idx, values, blocks):
        key, array, idx = self._buffer(name, idx)
        if key not in self.before:
            self.before[key] = array.copy()
        self.writes[key].append((name, idx, np.broadcast_to(blocks, idx.shape)))
        array[idx] = values

    def finish(self):
        for key, parts in self.writes.items():
            name = parts[0][0]
            idx = np.concatenate([p[1].ravel() for p in parts])
            blocks = np.concatenate([p[2].ravel() for p in parts])
            order = np.argsort(idx, kind="stable")
            idx, blocks = idx[order], blocks[order]
            twice = idx[1:][idx[1:] == idx[:-1]]
            assert twice.size == 0, f"{self.what}: {name}[{twice[0]}] is written twice"
            if key not in self.reads:
                continue
            r_idx = np.concatenate([p[1].ravel() for p in self.reads[key]])
            r_blocks = np.concatenate([p[2].ravel() for p in self.reads[key]])
            pos = np.minimum(np.searchsorted(idx, r_idx), idx.size - 1)
            hit = idx[pos] == r_idx
            other = hit & (blocks[pos] != r_blocks)
            assert not other.any(), (
                f"{self.what}: block {r_blocks[other][0]} reads {name}[{r_idx[other][0]}], "
                f"which block {blocks[pos][other][0]} writes in the same launch (a race)")


# --- the two ios -------------------------------------------------------------------------------

class UserSide:
    """The "user" io: the hooks model; counts output statements per i."""

    def __init__(self, machine, hooks, outputs):
        self.machine, self.hooks, self.outputs = machine, hooks, outputs

    def load(self, mem, idx, blocks):
        acc = self.machine.acc
        heads = self.hooks.segment_start(mem, idx, blocks) if acc.segmented else None
        return acc.pack(self.hooks.input(mem, idx, blocks), heads)

    def emit(self, mem, idx, blocks, item, prev_item, last_item):
        acc = self.machine.acc
        np.add.at(self.outputs, idx, 1)
        prev = acc.value(prev_item)
        if acc.segmented:  # io.cuh.j2: prev_item is the identity at a segment's start
            prev = np.where(self.hooks.segment_start(mem, idx, blocks), acc.value_identity, prev)
        values = acc.value(item), prev, acc.value(last_item)
        initial = getattr(self.hooks, "initial", None)
        if initial is not None:  # io.cuh.j2: the initial value comes first (in scan order)
            values = tuple(acc.after(initial, v) for v in values)
        self.hooks.output(mem, idx, blocks, *values)


class TotalsSide:
    """The "totals" io: a buffer of acc_t scanned exclusively in place."""

    def __init__(self, name):
        self.name = name

    def load(self, mem, idx, blocks):
        return mem.read(self.name, idx, blocks)

    def emit(self, mem, idx, blocks, item, prev_item, last_item):
        mem.write(self.name, idx, prev_item, blocks)


# --- the machine -------------------------------------------------------------------------------

class PlanMachine:
    """One stream's device: runs plans, keeping the single-pass state between calls as the
    runtime does (ticket counter starting at ``ticket_start``, epochs from 1).

    Subclasses may override ``seed`` (how a prefix is combined with a section's values) to
    show that the comparison notices a plan or kernel that gets operand order wrong."""

    def __init__(self, rng, ticket_start=0):
        self.rng = rng
        self.ticket = ticket_start % _TICKET_MODULUS
        self.ticket_base = self.ticket
        self.epoch = 0
        self.state = {}  # persistent temporaries: name -> bytes, kept between calls

    # -- one call -------------------------------------------------------------------------

    def run(self, plan, hooks):
        """Run every launch of ``plan`` with the user io modelled by ``hooks``; return
        ``hooks.result``."""
        self.plan, self.spec, self.scan_module = plan, plan.spec, plan.scan_module
        self.section = self.spec.section_size
        self.acc = Acc(self.spec)
        self.module = set(self.scan_module.kernels)
        self.temporaries = {t.name: t for t in plan.temporaries}
        assert len(self.temporaries) == len(plan.temporaries), "temporary names repeat"
        self.memory = hooks.memory(self.rng)
        for temp in plan.temporaries:
            assert temp.name not in self.memory, f"temporary {temp.name} shadows an argument"
            if temp.persistent:
                self._persistent(temp)
            else:
                assert temp.nbytes > 0 and temp.nbytes % self.acc.dtype.itemsize == 0, temp
                raw = self.rng.integers(0, 256, temp.nbytes, dtype=np.uint8)  # as left
                self.memory[temp.name] = raw.view(self.acc.dtype)
        self.runtime = {}
        if plan.single_pass_tiles:
            self.epoch += 1
            assert self.epoch < _EPOCH_LIMIT
            self.runtime = {"ticket_base": self.ticket_base, "epoch": self.epoch}
        self.tickets_counted = 0
        outputs = np.zeros(plan.n, np.int64)
        user = UserSide(self, hooks, outputs)
        for number, launch in enumerate(plan.launches):
            self._launch(number, launch, user)
        ran = np.flatnonzero(outputs != 1)
        assert ran.size == 0, (f"the output statement ran {outputs[ran[0]]} times for "
                               f"i={ran[0]} (once for each i in [0, {plan.n}) promised)")
        # the runtime starts the next call's tickets as many further on as Launch.tickets says
        self.ticket_base = (self.ticket_base + self.tickets_counted) % _TICKET_MODULUS
        assert self.ticket == self.ticket_base, (
            f"the ticket counter is at {self.ticket}, but the runtime starts the next call at "
            f"{self.ticket_base} (Launch.tickets: {self.tickets_counted})")
        return hooks.result(self.memory)

    def _persistent(self, temp):
        held = self.state.get(temp.name)
        if held is None or held.size < temp.nbytes:
            self.state[temp.name] = np.zeros(temp.nbytes, np.uint8)  # allocated zeroed

    # -- one launch -----------------------------------------------------------------------

    def _launch(self, number, launch, user):
        kernel = launch.kernel
        what = f"launch {number} ({kernel.name})"
        assert kernel in self.module, f"{what}: {kernel.name} is not in the module"
        assert isinstance(launch.grid, int) and 1 <= launch.grid <= MAX_GRID, what
        assert launch.block == self.spec.block_size, what
        params = kernel.family.parameters
        assert len(launch.args) == 1 + len(params), f"{what}: arguments {launch.args}"
        io_arg, *args = launch.args
        if kernel.io == "user":
            assert io_arg is USER_ARGS, f"{what}: the user io takes the user's arguments"
            side = user
        else:
            assert isinstance(io_arg, BufferArg) and io_arg.name in self.memory, what
            side = TotalsSide(io_arg.name)
        bound = {p.name: self._bind(what, p, a) for p, a in zip(params, args)}
        n = bound["n"]
        if kernel.io == "user":
            assert n == self.plan.n, f"{what}: the user io covers n={self.plan.n}, not {n}"
        mem = LaunchMemory(self.memory, what)
        self.blocks_launched = launch.grid
        getattr(self, kernel.family.name)(mem, side, launch.grid, **bound)
        mem.finish()
        if kernel.family.single_pass:
            assert launch.grid == self.plan.single_pass_tiles, (
                f"{what}: {launch.grid} tiles, but plan.single_pass_tiles says "
                f"{self.plan.single_pass_tiles} (the runtime sizes the tile status by it)")
            self.tickets_counted += launch.tickets(self.blocks_launched)

    def _bind(self, what, param, arg):
        if param.pointer:
            if arg is NULL:
                assert param.name == "status_values", f"{what}: {param.name} is NULL"
                return None
            assert isinstance(arg, BufferArg), f"{what}: {param.name} = {arg!r}"
            assert arg.name in self.temporaries, f"{what}: {arg.name} is not a temporary"
            return arg.name
        if param.name == "n":
            assert isinstance(arg, int) and not isinstance(arg, bool) and arg > 0, \
                f"{what}: n = {arg!r}"
            return arg
        assert arg == RuntimeArg(param.name), f"{what}: {param.name} = {arg!r}"
        assert param.name in self.runtime, f"{what}: the plan has no single-pass tiles"
        return self.runtime[param.name]

    # -- what every section kernel does -------------------------------------------------------

    def seed(self, prefix, values):
        """prefix op values: everything before a section on the LEFT."""
        return self.acc.combine(prefix, values)

    def indices(self, starts, n, owner=None):
        """Each row's indices, the block of each (row r: block r, or owner[r]), and which
        are inside the array."""
        idx = starts[:, None] + np.arange(self.section, dtype=np.int64)
        owner = np.arange(starts.size) if owner is None else owner
        blocks = np.broadcast_to(owner[:, None], idx.shape)
        return idx, blocks, idx < n

    def load(self, mem, side, starts, n, owner=None):
        """load_items: the sections at ``starts`` (one per row), identity past n."""
        idx, blocks, real = self.indices(starts, n, owner)
        rows = self.acc.identity(idx.shape)
        rows[real] = side.load(mem, idx[real], blocks[real])
        return rows

    def block_scan(self, rows):
        """Inclusive scan of each section, in order."""
        out = rows.copy()
        for k in range(1, rows.shape[1]):
            out[:, k] = self.acc.combine(out[:, k - 1], rows[:, k])
        return out

    def emit(self, mem, side, inclusive, starts, n, has_prefix, prefix, last_item, owner=None):
        """emit_section: item = prefix op inclusive[j], prev_item = prefix op inclusive[j-1]
        (the prefix at j = 0; the identity for a block without one)."""
        item = inclusive.copy()
        if has_prefix.any():
            item[has_prefix] = self.seed(prefix[has_prefix][:, None], inclusive[has_prefix])
        prev = np.empty_like(item)
        prev[:, 1:] = item[:, :-1]
        prev[:, 0] = self.acc.identity(len(starts))
        prev[has_prefix, 0] = prefix[has_prefix]
        idx, blocks, real = self.indices(starts, n, owner)
        last = np.broadcast_to(last_item[:, None], idx.shape)
        side.emit(mem, idx[real], blocks[real], item[real], prev[real], last[real])

    def write_totals(self, mem, totals, values, grid):
        """totals[b] = the section total; block 0 also writes totals[gridDim.x] = identity."""
        blocks = np.arange(grid)
        mem.write(totals, blocks, values, blocks)
        mem.write(totals, np.array([grid]), self.acc.identity(1), np.array([0]))

    # -- the families (families.py), as their templates define them --------------------------------

    def scan_one_section(self, mem, side, grid, n):
        starts = np.zeros(grid, np.int64)  # every block scans from 0: meant for grid 1
        inclusive = self.block_scan(self.load(mem, side, starts, n))
        none = np.zeros(grid, bool)
        self.emit(mem, side, inclusive, starts, n, none, self.acc.identity(grid),
                  inclusive[:, -1])

    def scan_sections(self, mem, side, grid, partial, totals, n):
        starts = np.arange(grid, dtype=np.int64) * self.section
        inclusive = self.block_scan(self.load(mem, side, starts, n))
        idx, blocks, real = self.indices(starts, n)
        mem.write(partial, idx[real], inclusive[real], blocks[real])
        self.write_totals(mem, totals, inclusive[:, -1], grid)

    def add_prefixes(self, mem, side, grid, partial, prefixes, n):
        starts = np.arange(grid, dtype=np.int64) * self.section
        idx, blocks, real = self.indices(starts, n)
        inclusive = self.acc.identity(idx.shape)  # only elements < n are ever emitted
        inclusive[real] = mem.read(partial, idx[real], blocks[real])
        block_ids = np.arange(grid)
        prefix = mem.read(prefixes, block_ids, block_ids)
        last = mem.read(prefixes, np.full(grid, grid), block_ids)
        self.emit(mem, side, inclusive, starts, n, block_ids > 0, prefix, last)

    def reduce_sections(self, mem, side, grid, totals, n):
        starts = np.arange(grid, dtype=np.int64) * self.section
        rows = self.load(mem, side, starts, n)
        total = rows[:, 0].copy()
        for k in range(1, rows.shape[1]):  # the fold of each section, in order
            total = self.acc.combine(total, rows[:, k])
        self.write_totals(mem, totals, total, grid)

    def scan_seeded(self, mem, side, grid, prefixes, n):
        starts = np.arange(grid, dtype=np.int64) * self.section
        inclusive = self.block_scan(self.load(mem, side, starts, n))
        block_ids = np.arange(grid)
        prefix = mem.read(prefixes, block_ids, block_ids)
        last = mem.read(prefixes, np.full(grid, grid), block_ids)
        self.emit(mem, side, inclusive, starts, n, block_ids > 0, prefix, last)

    def scan_tiles(self, mem, side, grid, status, status_values, ticket, ticket_base, epoch, n):
        self.check_tile_state(grid, status, status_values, ticket, epoch)
        # blocks start in any order; each takes the next ticket: tile = ticket - ticket_base
        owner = np.full(grid, -1, np.int64)  # owner[t]: the block that has tile t
        for block in self.rng.permutation(grid):
            tile = self.take_ticket(ticket_base)
            assert 0 <= tile < grid and owner[tile] < 0, (
                f"tile {tile} taken: not one of 0..{grid - 1} once each (a look-back would "
                f"wait forever or read outside the array)")
            owner[tile] = block
        self.blocks_launched = grid
        self.scan_owned_tiles(mem, side, owner, n)

    def scan_tiles_persistent(self, mem, side, grid, status, status_values, ticket,
                              ticket_base, epoch, n):
        self.check_tile_state(grid, status, status_values, ticket, epoch)
        # as many blocks as fit (any number up to grid); each takes tickets, in any
        # interleaving, until one finds no tile left
        blocks = int(self.rng.integers(1, grid + 1))
        owner = np.full(grid, -1, np.int64)
        running = list(range(blocks))
        while running:
            block = running[int(self.rng.integers(len(running)))]
            tile = self.take_ticket(ticket_base)
            if tile >= grid:
                running.remove(block)
                continue
            assert owner[tile] < 0, f"tile {tile} taken twice"
            owner[tile] = block
        assert (owner >= 0).all(), "a tile was never taken"
        self.blocks_launched = blocks
        self.scan_owned_tiles(mem, side, owner, n)

    def check_tile_state(self, grid, status, status_values, ticket, epoch):
        size = self.acc.dtype.itemsize
        # One 16-byte word per tile for values of 5 to 8 bytes where the tuning asks for it
        sixteen = 4 < size <= 8 and self.spec.tuning.status_16_byte_words
        packed = size <= 4 or sixteen
        state = {"ticket": 8, "status": grid * (16 if sixteen else 8 if packed else 4)}
        assert (status_values is None) == packed, "value slots: NULL exactly when packed"
        if not packed:  # aggregate and inclusive prefix of each tile, whole 64-bit words
            state["status_values"] = 2 * grid * (-(-size // 8) * 8)
        for name, arg in (("ticket", ticket), ("status", status),
                          ("status_values", status_values)):
            if name not in state:
                continue
            assert arg == name, f"scan_tiles: {name} bound to {arg}"
            temp = self.temporaries[arg]
            assert temp.persistent, f"{arg} must be kept between calls"
            assert temp.nbytes >= state[name], f"{arg}: {temp.nbytes} B < {state[name]} B"
        assert 1 <= epoch < _EPOCH_LIMIT

    def take_ticket(self, ticket_base):
        """The tile of the next ticket (ticket - ticket_base)."""
        tile = (self.ticket - ticket_base) % _TICKET_MODULUS
        self.ticket = (self.ticket + 1) % _TICKET_MODULUS
        return tile

    def scan_owned_tiles(self, mem, side, owner, n):
        """Tile t = row t, scanned by block owner[t]; prefixes by the look-back."""
        grid = owner.size
        tiles = np.arange(grid, dtype=np.int64)
        starts = tiles * self.section
        inclusive = self.block_scan(self.load(mem, side, starts, n, owner))
        totals = inclusive[:, -1]
        # the look-back: tile t's exclusive prefix is the fold of tiles 0..t-1, in order
        # (tile 0 publishes its total as it is; each later tile exclusive op total)
        exclusive = self.acc.identity(grid)
        if grid > 1:
            exclusive[1] = totals[0]
        for t in range(2, grid):
            exclusive[t:t + 1] = self.acc.combine(exclusive[t - 1:t], totals[t - 1:t])
        self.emit(mem, side, inclusive, starts, n, tiles > 0, exclusive,
                  self.acc.identity(grid), owner)


def run_plan(plan, hooks, rng, ticket_start=0):
    """Run ``plan`` once on a fresh machine; ``hooks.result``."""
    return PlanMachine(rng, ticket_start).run(plan, hooks)


__all__ = ["Acc", "LaunchMemory", "PlanMachine", "RecordHooks", "ScanHooks", "run_plan"]
