"""The engine-to-session queue stays bounded without losing what the session waits for."""

import asyncio

import numpy as np

from agent.engines.base import SpeechFrame, TextDelta, TranscriptDelta, TurnEnd
from agent.engines.outbox import Outbox


def frame() -> SpeechFrame:
    return SpeechFrame(np.zeros(1920, dtype=np.float32), 0)


async def drain(box: Outbox) -> list:
    box.close()
    return [e async for e in box]


async def test_when_full_the_oldest_speech_goes_and_is_counted():
    box = Outbox(capacity=3)
    first, second = frame(), frame()
    for e in (TextDelta("a"), first, second, TurnEnd()):
        box.put(e)
    assert len(box) == 3
    assert box.counters() == {"outbox_dropped_frames": 1, "outbox_dropped_events": 0}
    left = await drain(box)
    assert left[1] is second and isinstance(left[0], TextDelta) and isinstance(left[2], TurnEnd)


async def test_without_speech_queued_the_oldest_text_goes_but_never_a_turns_end():
    box = Outbox(capacity=2)
    for e in (TurnEnd(), TextDelta("a"), TranscriptDelta("user", "b", final=True)):
        box.put(e)
    assert box.counters() == {"outbox_dropped_frames": 0, "outbox_dropped_events": 1}
    left = await drain(box)
    assert isinstance(left[0], TurnEnd) and isinstance(left[1], TranscriptDelta)


async def test_a_reader_waiting_is_woken_and_ends_on_close():
    box = Outbox()
    got: list = []

    async def read() -> None:
        async for e in box:
            got.append(e)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    box.put(TextDelta("x"))
    await asyncio.sleep(0)
    box.close()
    box.put(TextDelta("after close"))
    await asyncio.wait_for(reader, 1)
    assert [e.text for e in got] == ["x"]
