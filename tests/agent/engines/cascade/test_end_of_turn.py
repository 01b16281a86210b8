"""The end of a turn from sound and words: the verdict's rules, and what they do to a spoken turn."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.engines.base import TranscriptDelta
from agent.engines.cascade import CascadeEngine
from agent.engines.cascade.end_of_turn import WordsConfig, decide
from agent.engines.cascade.models import load_models
from agent.profiles import get_profile
from agent.profiles.turn_words import Words, WordsVerdict
from benchmarks.harness import to_16k
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK, TICK_MS

FINISHED = WordsVerdict(Words.FINISHED, "understood")
UNFINISHED = WordsVerdict(Words.UNFINISHED, "ends with 'to'")
UNSURE = WordsVerdict(Words.UNSURE, "")
NEVER = 1 - 1e-6  # a smart-turn threshold that makes every sound verdict "unfinished"


def judged(words, p) -> tuple[int, str]:
    v = decide(words, p, threshold=0.5, short_ms=200, full_ms=480, hold_ms=1600)
    return v.silence_ms, v.reason


def test_sure_words_decide_whatever_the_sound_says():
    assert judged(FINISHED, 0.01) == (200, "words_finished")  # a hesitant voice, a finished request
    assert judged(UNFINISHED, 0.99) == (1600, "words_unfinished")  # a falling voice on "... to": held


def test_unsure_words_leave_it_to_the_sound_and_neither_means_the_full_silence():
    assert judged(UNSURE, 0.9) == (200, "sound_finished")
    assert judged(UNSURE, 0.1) == (480, "sound_unfinished")
    assert judged(None, 0.9) == (200, "sound_finished")  # words off
    assert judged(UNSURE, None) == (480, "unjudged")  # smart-turn off or failed


def test_the_verdict_stays_within_the_profiles_silences():
    # a profile whose full silence is shorter than the short one never waits longer for being judged finished,
    # nor shorter than its own full silence for being held
    assert decide(FINISHED, None, 0.5, short_ms=200, full_ms=150, hold_ms=1600).silence_ms == 150
    assert decide(UNFINISHED, None, 0.5, short_ms=200, full_ms=2000, hold_ms=1600).silence_ms == 2000


@pytest.mark.parametrize("value, error", [("yes", "expected true"), ({"hold": 1}, "unknown hold"),
                                          ({"hold_ms": 0}, "> 0")])  # fmt: skip
def test_bad_settings_are_refused_clearly(value, error):
    with pytest.raises(ValueError, match=error):
        WordsConfig.from_option(value)
    assert WordsConfig.from_option(False).enabled is False
    assert WordsConfig.from_option({"hold_ms": 2000}).hold_ms == 2000


@pytest.fixture(scope="module")
def models():
    return load_models()


def hibari(models, text: str) -> np.ndarray:
    """`text` in the bundled voice at 16 kHz (Moonshine hears it word for word, "to" included)."""
    tts = models.synthesizer
    return to_16k(np.concatenate(list(tts.stream(text))), tts.rate)


async def turns_of(session, audio: np.ndarray, seconds: float) -> list[TranscriptDelta]:
    """Feed `audio`, then silence, in real time for `seconds`; the user's final transcripts."""
    finals: list[TranscriptDelta] = []

    async def watch():
        async for ev in session.events():
            if isinstance(ev, TranscriptDelta) and ev.role == "user" and ev.final:
                finals.append(ev)

    watcher = asyncio.create_task(watch())
    try:
        for tick in range(int(seconds * 1000 / TICK_MS)):
            chunk = audio[tick * INPUT_SAMPLES_PER_TICK : (tick + 1) * INPUT_SAMPLES_PER_TICK]
            session.feed(AlignedChunk(tick, np.pad(chunk, (0, INPUT_SAMPLES_PER_TICK - chunk.size))))
            await asyncio.sleep(TICK_MS / 1000)
        return finals
    finally:
        watcher.cancel()


async def one_turn(models, audio: np.ndarray, end_silence_ms: int, after_s: float, **engine_options):
    """`audio` into a fresh in-car session, then `after_s` of silence: the user's final transcripts, the counters."""
    engine = CascadeEngine(models=models, **engine_options)
    session = await engine.open_session(get_profile("in_car"), {"end_silence_ms": end_silence_ms})
    try:
        finals = await turns_of(session, audio, audio.size / 16_000 + after_s)
        return finals, session.counters()
    finally:
        await session.close()
        await engine.close()


async def test_a_slow_speakers_pause_after_to_is_not_the_end_of_the_turn(models):
    """A slow speaker's "set the temperature to ... (1.2 s) ... twenty one degrees" is one turn, though the
    profile's full silence (900 ms: time for the verdict on a slow, busy machine) is shorter than the pause and the
    voice falls at "to" (smart-turn calls hibari's every pause finished)."""
    gap = np.zeros(int(1.2 * 16_000), np.float32)
    audio = np.concatenate([hibari(models, "Set the temperature to,"), gap, hibari(models, "twenty one degrees.")])
    finals, counts = await one_turn(models, audio, 900, 2.5)
    print("turns:", [f.text for f in finals], counts)
    assert len(finals) == 1, f"the pause cut the turn: {[f.text for f in finals]}"
    assert "21" in finals[0].text or "twenty" in finals[0].text.lower()
    assert counts["end_of_turn_words_unfinished"] >= 1


async def test_a_finished_request_ends_after_the_short_silence_when_the_sound_hesitates(models):
    audio = hibari(models, "Lock the car doors.")
    finals, counts = await one_turn(models, audio, 2000, 2.8, smart_turn={"threshold": NEVER})  # always "unfinished"
    assert len(finals) == 1
    waited = (finals[0].end_tick - finals[0].speech_end_tick) * TICK_MS
    print(f"ended after {waited} ms of silence; {counts}")
    assert counts["end_of_turn_words_finished"] == 1
    assert 200 <= waited < 2000  # the short silence, give or take a verdict that came late on a busy machine
