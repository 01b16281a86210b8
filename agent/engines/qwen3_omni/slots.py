"""Key/value memory preallocated per sequence slot, written in place: batched decode steps without copies.

A dynamic cache per session would have to be padded and concatenated into one
batch cache for every batched decode step, and split back after it (each step
copying every session's whole cache). Here one pool per model part (Thinker,
Talker) holds `[slots, kv_heads, capacity + 1, head_dim]` per layer; each
sequence owns a row. A decode step over several sessions runs on rows
`0..k` of the pool as they lie (a view), writes each row's new key and value
at that row's own position, and masks every row to its own length. Rows in
that range that are not stepping write at their current end, which their next
real step overwrites, and their outputs are ignored.

A prefill (one sequence, many tokens) runs on its row alone. Shapes depend
only on the number of rows and a length bucket, so a step can be captured as
a CUDA graph per (rows, bucket) (`graphs.py`): a `BatchStep` made for a shape
is reused, its positions overwritten in place. Each row has one spare column
past its capacity, where an idle row that is full writes its step's garbage.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

LENGTH_BUCKET = 64  # attention reads a row's memory up to the batch's longest length, rounded up to this


class CapacityError(RuntimeError):
    """A sequence would outgrow its slot (the engine trims its conversations below this)."""


class SlotPool:
    """Preallocated keys and values for sequences of one model part; grows by doubling when every row is taken."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, slots: int, dtype, device) -> None:
        self.capacity = capacity
        self.generation = 0  # moves on whenever the buffers are replaced: graphs captured on them are stale
        shape = (slots, kv_heads, capacity + 1, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.lengths = [0] * slots
        self.free = list(range(slots))

    @property
    def slots(self) -> int:
        return len(self.lengths)

    def acquire(self) -> SlotCache:
        if not self.free:
            self._grow()
        slot = min(self.free)  # the lowest rows first: batched steps run on rows 0..k
        self.free.remove(slot)
        self.lengths[slot] = 0
        return SlotCache(self, slot)

    def release(self, slot: int) -> None:
        self.lengths[slot] = 0
        self.free.append(slot)

    def _grow(self) -> None:
        n = self.slots
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                store[i] = torch.cat([buf, torch.zeros_like(buf)])
        self.lengths += [0] * n
        self.free += list(range(n, 2 * n))
        self.generation += 1

    def match(self, key: torch.Tensor) -> None:
        """Follow the model's dtype if its weights were cast after the pool was made (once, not per step)."""
        if key.dtype != self.keys[0].dtype:
            for store in (self.keys, self.values):
                for i, buf in enumerate(store):
                    store[i] = buf.to(key.dtype)
            self.generation += 1

    def read_length(self, longest: int) -> int:
        return min(self.capacity, -(-longest // LENGTH_BUCKET) * LENGTH_BUCKET)


class SlotCache:
    """One sequence's row, used as the model's cache for a prefill on that row alone.

    Speaks the part of transformers' cache interface the model calls: `update` per layer (write at the row's end,
    return the row up to the new end), `get_seq_length`, `crop`. The length moves on in `advance`, after every
    layer has written. Dropping the object gives the row back to the pool."""

    def __init__(self, pool: SlotPool, slot: int) -> None:
        self.pool = pool
        self.slot = slot
        self._pending = 0
        weakref.finalize(self, pool.release, slot)

    @property
    def length(self) -> int:
        return self.pool.lengths[self.slot]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Negative: drop that many tokens from the end (transformers' convention); else keep `max_length`."""
        n = self.length + max_length if max_length < 0 else min(self.length, max_length)
        self.pool.lengths[self.slot] = max(0, n)

    def prefill_mask(self, new: int, device) -> torch.Tensor:
        """[1, 1, new, length+new] causal over the row: token t sees everything before it."""
        start = self.length
        if start + new > self.pool.capacity:
            raise CapacityError(f"a sequence of {start + new} tokens exceeds the slot capacity {self.pool.capacity}")
        self._pending = new
        keys = torch.arange(start + new, device=device)
        queries = torch.arange(start, start + new, device=device)
        return (keys[None, :] <= queries[:, None])[None, None]

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        start, end = self.length, self.length + key.shape[2]
        self.pool.match(key)
        k, v = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        k[self.slot, :, start:end] = key[0]
        v[self.slot, :, start:end] = value[0]
        return k[self.slot : self.slot + 1, :, :end], v[self.slot : self.slot + 1, :, :end]

    def advance(self) -> None:
        self.pool.lengths[self.slot] += self._pending
        self._pending = 0


class BatchStep:
    """A one-token decode step over rows 0..rows-1 of a pool, for the given sequences (others in range idle).

    Its shape (rows, read) is fixed when it is made; `load` gives it the next step's sequences, copying their
    positions into the same tensor, so a graph captured on this step replays on new positions."""

    def __init__(
        self, pool: SlotPool, caches: list[SlotCache], device, rows: int | None = None, read: int | None = None
    ) -> None:
        self.pool = pool
        self.rows = rows or max(c.slot for c in caches) + 1
        self.read = read or pool.read_length(max(pool.lengths[: self.rows]) + 1)
        self.pos = torch.zeros(self.rows, dtype=torch.long, device=device)
        self.row_ids = torch.arange(self.rows, device=device)
        self.columns = torch.arange(self.read, device=device)
        self.load(caches)

    def load(self, caches: list[SlotCache]) -> None:
        capacity = self.pool.capacity
        for c in caches:
            if c.length + 1 > capacity:
                raise CapacityError(f"a sequence of {c.length + 1} tokens exceeds the slot capacity {capacity}")
        positions = self.pool.lengths[: self.rows]  # idle rows write at their end: overwritten before it counts
        if max(c.slot for c in caches) >= self.rows or min(capacity, max(positions) + 1) > self.read:
            raise ValueError(f"a step over {self.rows} rows reading {self.read} cannot hold these sequences")
        self.rows_stepping = [c.slot for c in caches]  # rows, not caches: a step kept for a graph holds no sequence
        self.stepping = torch.tensor(self.rows_stepping, device=self.pos.device)  # for scatter and gather
        self.pos.copy_(torch.tensor(positions))

    @property
    def mask(self) -> torch.Tensor:
        """[rows, 1, 1, read]: each row sees its memory up to its own position (computed on the device)."""
        return (self.columns[None, :] <= self.pos[:, None])[:, None, None, :]

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        self.pool.match(key)
        k, v = self.pool.keys[layer_idx], self.pool.values[layer_idx]
        k[self.row_ids, :, self.pos] = key[:, :, 0]
        v[self.row_ids, :, self.pos] = value[:, :, 0]
        return k[: self.rows, :, : self.read], v[: self.rows, :, : self.read]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.read - 1

    def scatter(self, per_sequence: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        """Per-sequence inputs [n, ...] placed on their rows of a [rows, ...] batch; idle rows get `fill`."""
        out = fill.expand(self.rows, *fill.shape[1:]).clone()
        out[self.stepping] = per_sequence.to(out.dtype)
        return out

    def gather(self, per_row: torch.Tensor) -> torch.Tensor:
        """The stepping sequences' rows of a [rows, ...] output, in the order they were given."""
        return per_row[self.stepping]

    def advance(self) -> None:
        for slot in self.rows_stepping:
            self.pool.lengths[slot] += 1
