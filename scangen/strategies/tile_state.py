"""The single-pass tile status: its layout for any value size, in one place.

The plan (bytes it moves), the renderer (how a template publishes and polls) and the
runtime (what it allocates and clears) all ask this object.

* Values of up to 4 bytes are *packed*: epoch, flag and value share one 64-bit word, written
  and read whole with relaxed accesses, so a reader sees a value together with the flag
  that vouches for it.
* Values of 5 to 8 bytes are packed the same way into one 16-byte word (value, then epoch
  and flag), read and written with one relaxed vector access, where the spec's tuning asks
  for it (Tuning.status_16_byte_words, the default); otherwise they are split, as wider
  ones are.
* Wider values (any size) are *split*: a 32-bit epoch-and-flag word per tile, and two value
  slots per tile (aggregate, inclusive prefix) written before the flag is released and read
  word by word after it is acquired.

Each call tags its status with an epoch, so entries from earlier calls read as "not yet
published" and the status needs no reset launch; the runtime clears it once when the epoch
wraps (EPOCH_LIMIT).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Epochs use 30 bits of the status word.
EPOCH_LIMIT = 1 << 30
#: Bytes of the atomic ticket counter that gives tiles their order.
TICKET_BYTES = 8
#: The status arrays start on this boundary inside the state allocation.
ALIGNMENT = 256


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class TileState:
    """The status layout for values of ``itemsize`` bytes (``wide_words``: values of 5 to 8
    bytes packed in 16-byte words)."""

    itemsize: int
    wide_words: bool = False

    @classmethod
    def of(cls, spec) -> TileState:
        """The layout a ScanSpec's kernels use: its accumulator size and its tuning."""
        return cls(spec.acc_itemsize, spec.tuning.status_16_byte_words)

    @property
    def packed(self) -> bool:
        """Whether value, epoch and flag share one word (of word_bytes)."""
        return self.itemsize <= 4 or (self.wide_words and self.itemsize <= 8)

    @property
    def word_bytes(self) -> int:
        """Bytes of one tile's status word."""
        if not self.packed:
            return 4
        return 8 if self.itemsize <= 4 else 16

    @property
    def slot_word_bits(self) -> int:
        """A split value slot is read and written in words of this many bits."""
        return 64 if self.itemsize % 8 == 0 else 32

    @property
    def slot_words(self) -> int:
        """Words per value slot (a value padded up to whole words)."""
        word = self.slot_word_bits // 8
        return -(-self.itemsize // word)

    @property
    def slot_bytes(self) -> int:
        return self.slot_words * self.slot_word_bits // 8

    def value_bytes(self, tiles: int) -> int:
        """Bytes of the separate value slots (0 when packed)."""
        return 0 if self.packed else 2 * tiles * self.slot_bytes

    def status_bytes(self, tiles: int) -> int:
        """Bytes of status a call of ``tiles`` tiles writes: words plus value slots."""
        return tiles * self.word_bytes + self.value_bytes(tiles)

    def describe(self, tiles: int) -> str:
        if self.packed:
            return f"{tiles} packed {8 * self.word_bytes}-bit words: epoch, flag and value"
        return (f"{tiles} epoch-tagged 32-bit flags and {2 * tiles} value slots "
                f"(aggregate and inclusive prefix of each tile)")

    def template_context(self) -> dict:
        """What templates/tile/state.cuh.j2 needs to know of the layout."""
        return dict(acc_size=self.itemsize, packed_status=self.packed,
                    status_word_bytes=self.word_bytes, status_word_bits=self.slot_word_bits,
                    status_slot_words=self.slot_words)

    # The layout of one allocation holding the ticket and the status of `capacity` tiles.

    def allocation_bytes(self, capacity: int) -> int:
        return ALIGNMENT + aligned(capacity * self.word_bytes) + self.value_bytes(capacity)

    def offsets(self, capacity: int) -> dict:
        """Byte offsets of the ticket, the status words and the value slots."""
        return {"ticket": 0, "status": ALIGNMENT,
                "status_values": ALIGNMENT + aligned(capacity * self.word_bytes)}
