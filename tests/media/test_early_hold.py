"""Listening: speech over a sounding reply heard as it arrives, before its 80 ms tick is whole; the tick's
parts cleaned of the echo as they come and not again."""

from __future__ import annotations

import numpy as np

from media.aligner import AlignedChunk
from media.early_hold import Listening
from media.echo_cancel import EchoCanceller
from media.endpoint import EndpointConfig
from media.turn_taking import Floor, TurnTaking
from tests.media.test_echo_cancel import PULL, TICK, agent_speech, room  # noqa: F401 (a fixture)

PART = 320  # a 20 ms packet at 16 kHz


class Loud:
    """Voiced when loud; `reset` counted (each reply is listened to afresh)."""

    def __init__(self) -> None:
        self.resets = 0

    def __call__(self, audio: np.ndarray) -> bool:
        return bool(audio.size) and float(np.abs(audio).max()) > 0.1

    def reset(self) -> None:
        self.resets += 1


class Never(Loud):
    def __call__(self, audio: np.ndarray) -> bool:
        return False


def arrive(listening: Listening, tick: int, audio: np.ndarray, sounding: bool = True) -> list[bool]:
    """The tick's audio in 20 ms packets, as the aligner has it after each: whether the reply was held after each."""
    held = []
    for end in range(PART, audio.size + 1, PART):
        listening.arrived(tick, audio[:end], sounding)
        held.append(bool(listening.floor and listening.floor.held))
    return held


def test_a_voice_holds_the_sounding_reply_before_its_tick_is_whole():
    tick = np.zeros(TICK, np.float32)
    tick[2 * PART :] = 0.5  # the voice starts 40 ms into the tick
    now = iter(range(100))
    listening = Listening(None, Floor(), clock=lambda: float(next(now)))
    listening.detector = Loud()
    assert arrive(listening, 7, tick) == [False, False, True, True]  # held at its packet, not at the tick's end
    assert listening.floor.early_tick == 7 and listening.floor.early == 1 and listening.detector.resets == 1
    assert listening.seconds == 1  # the detector's time: silence is not listened to, nor is a held reply
    quiet = Listening(None, Floor())
    quiet.detector = Loud()
    assert arrive(quiet, 7, tick, sounding=False) == [False] * 4  # nothing playing: nothing to hold
    no_barge_in = Listening(None, Floor(barge_in=False))
    no_barge_in.detector = Loud()
    assert arrive(no_barge_in, 7, tick) == [False] * 4  # the profile lets no one talk over its replies


def test_the_ticks_own_judgement_keeps_an_early_hold_or_lets_it_go():
    turns = TurnTaking(EndpointConfig(start_ticks=2))
    voice = np.full(TICK, 0.3, np.float32)
    for t in range(5):  # a quiet room: the energy detector's floor
        turns.feed(AlignedChunk(t, np.zeros(TICK, np.float32)), lambda: True)
    turns.floor.hold_early(5)
    assert turns.floor.held
    turns.feed(AlignedChunk(5, np.zeros(TICK, np.float32)), lambda: True)  # the tick judged silent after all
    assert not turns.floor.held and turns.floor.early_released == 1
    turns.floor.hold_early(6)
    turns.feed(AlignedChunk(5, np.zeros(TICK, np.float32)), lambda: True)  # a tick before the hold's: no verdict
    assert turns.floor.held and turns.floor.early_tick == 6
    turns.feed(AlignedChunk(6, voice), lambda: True)  # voiced: the reply stays held, as at any first voiced tick
    assert turns.floor.held and turns.floor.early_released == 1 and turns.floor.early_tick is None


def test_a_tick_cleaned_in_parts_is_the_tick_cleaned_whole(agent_speech):  # noqa: F811
    """The canceller takes the tick in progress packet by packet while the reply sounds; the engine then gets the
    same audio, and the same marks, as from cleaning each whole tick: nothing cleaned twice, nothing skipped."""
    far = agent_speech[: 24_000 * 4]
    mic = room(far, 200, -6)
    whole, parted = EchoCanceller(), EchoCanceller()
    listening = Listening(parted, Floor())
    listening.detector = Never()
    played = np.zeros(mic.size * 3 // 2 + PULL * 4, np.float32)
    played[: far.size] = far
    outs: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    marks: tuple[list[bool], list[bool]] = ([], [])
    for i, t in enumerate(range(0, mic.size, TICK)):
        for k in range(4):
            frame = (np.clip(played[t * 3 // 2 + k * PULL :][:PULL], -1, 1) * 32767).astype(np.int16)
            whole.played(frame)
            parted.played(frame)
        audio = mic[t : t + TICK]
        outs[0].append(whole.clean(audio))
        marks[0].append(whole.echo_only)
        arrive(listening, i, audio[: 3 * PART])  # three packets of four before the tick is whole
        chunk = listening.tick(AlignedChunk(i, audio), talking=False)
        outs[1].append(chunk.audio)
        marks[1].append(chunk.echo)
    # The same, but where the echo's tail died away: a part passes as heard from its own packet, not its tick's
    differ = np.flatnonzero(np.concatenate(outs[0]) != np.concatenate(outs[1]))
    assert differ.size <= TICK and (differ.size == 0 or differ[-1] - differ[0] < TICK), differ
    assert parted.stats.passed_frames >= whole.stats.passed_frames - TICK // 160
    assert marks[0] == marks[1] and sum(marks[0]) > 5  # the echo was marked, the same ticks both ways
    assert parted.stats.frames == whole.stats.frames and parted.stats.reference_padded == whole.stats.reference_padded
