"""The inbound audio's adaptive jitter buffer (sans-I/O: arrival times passed in).

What it is for: a server that listens does not play its input out loud, so
smoothing playout buys nothing; what matters is that each packet is there, in
order, as early as possible. A packet that is next in order goes at once (on
a clean line nothing waits, as before). A packet missing from the sequence
is waited for until it is late by more than the line's recent jitter (the
target), measured as libwebrtc's NetEq does from the packets' own arrival
times against their timestamps; then it is given up as lost and its slot is
made up: from the FEC copy the next packet carries when it has one, else by
the decoder's concealment. Where the packets after the gap carry FEC, the
wait is a frame longer while the next one has not come: it carries the copy.
A packet that comes after its slot was made up is late (counted; it only
widens the target). The target follows the worst delay of the last few
seconds, so it grows under jitter and falls back when
the line calms; until a second of packets has measured the line it is that
of a bad one (a gap then is rare: the call is setting up).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slot:
    """One packet's place in the stream, in order: its payload, or a lost packet's stand-in."""

    timestamp: int  # RTP timestamp (unwrapped)
    samples: int  # its length in RTP units (what a stand-in makes up)
    payload: bytes | None  # None: lost
    following: bytes | None = None  # lost: the next packet, which may carry its FEC copy


@dataclass
class JitterConfig:
    window: int = 150  # packets (3 s of 20 ms ones) whose delays set the target
    margin_ms: float = 4.0  # over the worst delay in the window
    unmeasured_ms: float = 60.0  # the wait until `settle` packets have measured the line: a bad line's
    settle: int = 50
    max_target_ms: float = 240.0  # a missing packet is never waited for longer
    max_fill_ms: float = 120.0  # a longer gap is not made up: the aligner fills it with silence
    capacity: int = 64  # packets held; past it the oldest gap is given up
    restart_packets: int = 500  # a packet this far behind the next starts the stream over (the sender restarted)


@dataclass
class JitterStats:
    packets: int = 0
    late: int = 0  # came after their slot was given up, or after it played (duplicates)
    duplicates: int = 0  # held twice
    lost: int = 0  # slots given up (made up by the decoder: from the next packet's FEC copy, or concealed)
    skipped: int = 0  # ... of them in a gap too long to make up
    waits: int = 0  # packets that waited for one before them
    restarts: int = 0
    target_ms: float = 0.0  # now
    depth: int = 0  # packets held now


class _WindowExtreme:
    """The least (or greatest) of the last `size` values, in O(1) amortised."""

    def __init__(self, size: int, greatest: bool) -> None:
        self.size, self.sign = size, -1.0 if greatest else 1.0
        self._items: deque[tuple[int, float]] = deque()
        self._n = 0

    def add(self, value: float) -> float:
        v = self.sign * value
        while self._items and self._items[-1][1] >= v:
            self._items.pop()
        self._items.append((self._n, v))
        self._n += 1
        while self._items[0][0] <= self._n - 1 - self.size:
            self._items.popleft()
        return self.sign * self._items[0][1]


def _unwrap(value: int, last: int, bits: int) -> int:
    """`value` (mod 2**bits) as the number nearest `last`."""
    span = 1 << bits
    delta = (value - last) % span
    return last + delta if delta < span // 2 else last + delta - span


class AdaptiveJitterBuffer:
    """Packets in (sequence number, timestamp, payload, arrival time), slots out in order."""

    def __init__(
        self,
        clock_rate: int = 48_000,
        config: JitterConfig | None = None,
        carries_fec: Callable[[bytes], bool] = lambda payload: False,
    ) -> None:
        self.config = config or JitterConfig()
        self.rate = clock_rate
        self.stats = JitterStats()
        self._held: dict[int, tuple[int, bytes]] = {}
        self._next: int | None = None  # the sequence number of the next slot
        self._seq = 0  # the last sequence number seen (unwrapped)
        self._ts = 0  # ... and timestamp
        self._frame = clock_rate // 50  # a packet's length, as the stream shows it
        self._base = 0.0  # the least transit in the window: a packet that came as early as any
        self._carries_fec = carries_fec  # whether a payload holds the one before's FEC copy (asked only at a gap)
        self._start_measuring()

    def _start_measuring(self) -> None:
        window = self.config.window
        self._least_transit = _WindowExtreme(window, greatest=False)
        self._most_transit = _WindowExtreme(window, greatest=True)

    def push(self, sequence: int, timestamp: int, payload: bytes, now: float) -> list[Slot]:
        """A packet as it arrived; the slots that can go now."""
        s = self.stats
        s.packets += 1
        out: list[Slot] = []
        if self._next is not None and _unwrap(sequence, self._seq, 16) < self._next - self.config.restart_packets:
            s.restarts += 1
            out = [Slot(ts, self._frame, payload) for _, (ts, payload) in sorted(self._held.items())]
            self._held.clear()
            self._next = None
            self._start_measuring()  # its timestamps start anywhere: the old transit times say nothing of it
        if self._next is None:
            self._seq, self._ts, self._next = sequence, timestamp, sequence
        seq, ts = _unwrap(sequence, self._seq, 16), _unwrap(timestamp, self._ts, 32)
        if seq == self._seq + 1 and 0 < ts - self._ts <= self.rate * 120 // 1000:
            self._frame = ts - self._ts
        if seq > self._seq:
            self._seq, self._ts = seq, ts
        self._measure(ts, now)
        if seq < self._next:
            s.late += 1
            return out
        if seq in self._held:
            s.duplicates += 1
            return out
        self._held[seq] = (ts, payload)
        if seq != self._next:
            s.waits += 1
        out += self._release(now)
        if len(self._held) > self.config.capacity:
            out += self._release(now, give_up=True)
        return out

    def poll(self, now: float) -> list[Slot]:
        """The slots whose wait is over by `now`."""
        return self._release(now)

    def deadline(self) -> float | None:
        """When the missing next packet is given up (None: nothing is waited for)."""
        if self._next is None or not self._held:
            return None
        return self._due(min(self._held))

    def _due(self, first: int) -> float:
        """When the next slot is given up, `first` being the earliest packet held after it."""
        assert self._next is not None
        ts = self._held[first][0] - (first - self._next) * self._frame
        if first != self._next + 1 and self._carries_fec(self._held[first][1]):
            ts += self._frame  # the next packet carries this one's FEC copy: given up with it, not before it came
        return ts / self.rate + self._base + self.stats.target_ms / 1000

    def _measure(self, ts: int, now: float) -> None:
        transit = now - ts / self.rate
        self._base = self._least_transit.add(transit)
        worst = self._most_transit.add(transit) - self._base  # the spread of the window's transit times
        cfg = self.config
        target = min(cfg.max_target_ms, 1000 * worst + cfg.margin_ms) if worst > 0.001 else 0.0
        self.stats.target_ms = target if self.stats.packets >= cfg.settle else max(target, cfg.unmeasured_ms)

    def _release(self, now: float, give_up: bool = False) -> list[Slot]:
        out: list[Slot] = []
        s, held = self.stats, self._held
        assert self._next is not None
        while held:
            if self._next in held:
                ts, payload = held.pop(self._next)
                out.append(Slot(ts, self._frame, payload))
            else:
                first = min(held)
                if not give_up and now < self._due(first):
                    break
                give_up = False
                missing = first - self._next
                if missing * self._frame > self.config.max_fill_ms * self.rate / 1000:
                    s.lost += missing
                    s.skipped += missing
                    self._next = first
                    continue
                s.lost += 1
                following = held[self._next + 1][1] if self._next + 1 in held else None
                out.append(Slot(held[first][0] - missing * self._frame, self._frame, None, following))
            self._next += 1
        s.depth = len(held)
        return out
