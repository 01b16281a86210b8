"""A bounded, ordered event queue from an engine to its session.

Engines put events from anywhere on the loop; the session pulls them with
`async for`. Speech is pulled at playback pace, so a reply may sit here; the
queue is bounded and, when full, the oldest speech frame goes (counted)
rather than memory growing.
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
        self._items: deque[EngineEvent] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: EngineEvent) -> None:
        if self._closed:
            return
        if len(self._items) >= self.capacity:
            for i, old in enumerate(self._items):
                if isinstance(old, SpeechFrame):
                    del self._items[i]
                    self.dropped_frames += 1
                    break
            else:
                self._items.popleft()
        self._items.append(event)
        self._ready.set()

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
