"""A bounded, ordered event queue from an engine to its session.

Engines put events from anywhere on the loop; the session pulls them with
`async for`. Speech is pulled at playback pace, so a reply may sit here; the
queue is bounded and, when full, the oldest speech frame goes rather than
memory growing; with no speech queued, the oldest text or transcript goes. A
turn's end is never dropped: the session would wait for it. Both drops are
counted and reach `/metrics` through the engine's counters.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from agent.engines.base import EngineEvent, SpeechFrame, TextDelta, TranscriptDelta, TurnEnd


class Outbox:
    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self.dropped_frames = 0
        self.dropped_events = 0
        self._items: deque[EngineEvent] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: EngineEvent) -> None:
        if self._closed:
            return
        if len(self._items) >= self.capacity:
            self._make_room()
        self._items.append(event)
        self._ready.set()

    def _make_room(self) -> None:
        victim = next((i for i, e in enumerate(self._items) if isinstance(e, SpeechFrame)), None)
        if victim is not None:
            self.dropped_frames += 1
        else:
            victim = next((i for i, e in enumerate(self._items) if not isinstance(e, TurnEnd)), 0)
            self.dropped_events += 1
        del self._items[victim]

    def counters(self) -> dict[str, float]:
        """What was dropped for room, for the engine's `counters()`."""
        return {"outbox_dropped_frames": self.dropped_frames, "outbox_dropped_events": self.dropped_events}

    def cancel_reply(self) -> int:
        """Drop the queued assistant output (barge-in); keeps user transcripts."""
        keep = deque(e for e in self._items if isinstance(e, TranscriptDelta) and e.role == "user")
        n = len(self._items) - len(keep)
        self._items = keep
        return n

    def has_reply(self) -> bool:
        return any(isinstance(e, (SpeechFrame, TextDelta, TurnEnd)) for e in self._items)

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[EngineEvent]:
        while True:
            while not self._items:
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
            yield self._items.popleft()
