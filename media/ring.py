"""RingBuffer: a bounded FIFO with watermarks and a drop policy.

Sans-I/O. The producer never blocks: when the buffer is full the policy says
what is lost, and the loss is counted. For audio the buffer raises
`pressure` at the high watermark, long before it is full, so the session can
shed video (or slow the engine) first; pressure clears at the low watermark
(hysteresis, so it does not flap).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class DropPolicy(Enum):
    DROP_OLDEST = "drop_oldest"  # keep the freshest (video)
    DROP_NEWEST = "drop_newest"  # refuse new items when full


@dataclass(slots=True)
class RingStats:
    pushed: int = 0
    popped: int = 0
    dropped: int = 0
    high_water: int = 0  # the most items ever held at once
    pressure_events: int = 0  # times the high watermark was crossed


class RingBuffer(Generic[T]):
    def __init__(
        self,
        capacity: int,
        policy: DropPolicy = DropPolicy.DROP_OLDEST,
        high: int | None = None,
        low: int | None = None,
        name: str = "ring",
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.high = capacity if high is None else high
        self.low = self.high // 2 if low is None else low
        if not 0 <= self.low < self.high <= capacity:
            raise ValueError(f"need 0 <= low < high <= capacity, got {self.low}, {self.high}, {capacity}")
        self.policy = policy
        self.name = name
        self.stats = RingStats()
        self.pressure = False
        self._items: deque[T] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: T) -> bool:
        """Add an item; False when the item itself was refused (DROP_NEWEST, full)."""
        self.stats.pushed += 1
        if len(self._items) >= self.capacity:
            self.stats.dropped += 1
            if self.policy is DropPolicy.DROP_NEWEST:
                return False
            self._items.popleft()
        self._items.append(item)
        n = len(self._items)
        if n > self.stats.high_water:
            self.stats.high_water = n
        if not self.pressure and n >= self.high:
            self.pressure = True
            self.stats.pressure_events += 1
        return True

    def pop(self) -> T | None:
        if not self._items:
            return None
        self.stats.popped += 1
        item = self._items.popleft()
        if self.pressure and len(self._items) <= self.low:
            self.pressure = False
        return item

    def peek(self) -> T | None:
        return self._items[0] if self._items else None

    def clear(self) -> int:
        """Drop everything (counted); returns how many items went."""
        n = len(self._items)
        self._items.clear()
        self.stats.dropped += n
        self.pressure = False
        return n
