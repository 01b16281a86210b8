"""TurnTaking: the opening of every engine's feed(), on a scripted tick stream."""

from __future__ import annotations

import numpy as np

from media.aligner import AlignedChunk, VideoSample
from media.clock import INPUT_SAMPLES_PER_TICK
from media.endpoint import EndpointConfig, EndpointEvent
from media.turn_taking import TurnTaking

LOUD = np.full(INPUT_SAMPLES_PER_TICK, 0.3, np.float32)
QUIET = np.zeros(INPUT_SAMPLES_PER_TICK, np.float32)


def chunk(tick: int, audio: np.ndarray, image: np.ndarray | None = None) -> AlignedChunk:
    video = VideoSample(image, tick * 0.08, tick * 0.08, "exact") if image is not None else None
    return AlignedChunk(tick, audio, video)


def run(turns: TurnTaking, pattern: str, replying: bool = False, start: int = 0) -> dict[int, EndpointEvent]:
    """'x' a voiced tick, '.' a silent one; the ticks at which something happened."""
    got = {}
    for i, c in enumerate(pattern, start):
        step = turns.feed(chunk(i, LOUD if c == "x" else QUIET), lambda: replying)
        if step.event is not None:
            got[i] = step.event
        if step.barge_in:
            got[-i] = "barge_in"
    return got


def test_events_and_the_turns_audio():
    turns = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    events = run(turns, "...xxxx......")
    assert events == {4: EndpointEvent.START, 8: EndpointEvent.PAUSE, 12: EndpointEvent.END}
    ended = turns.end()
    assert (ended.speech_end_tick, ended.end_tick) == (6, 12)
    # pre-roll (3 ticks before the start tick), the voice, and a 3-tick tail after the last voiced tick
    assert ended.audio.size == (6 + 3 - 1 + 1) * INPUT_SAMPLES_PER_TICK
    assert turns.end().audio.size == 0  # taken: the next turn records afresh


def test_barge_in_only_while_replying_and_where_the_profile_allows():
    assert -4 in run(TurnTaking(), "...xx", replying=True)
    assert -4 not in run(TurnTaking(), "...xx", replying=False)
    assert -4 not in run(TurnTaking(barge_in=False), "...xx", replying=True)


def test_recent_camera_frames():
    turns = TurnTaking(keep_frames=2)
    frames = [np.full((2, 2, 3), i, np.uint8) for i in range(3)]
    for i, f in enumerate(frames):
        turns.feed(chunk(i, QUIET, f))
    assert [int(f[0, 0, 0]) for f in turns.images()] == [1, 2]  # the last two kept, oldest first
    for t in range(3, 60):
        turns.feed(chunk(t, QUIET))
    assert turns.images() == []  # nothing fresh: the camera is off
