"""A voice over the agent's echo found at its onset (media/double_talk.py), through the canceller as the session
runs it: sox's room, the reply with pauses in it, and phrases and voices apart from the room benchmark's."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.harness import espeak_rendering, room_impulse
from media.clock import INPUT_SAMPLES_PER_TICK as TICK
from media.double_talk import DoubleTalk, DoubleTalkConfig
from media.echo_cancel import EchoCanceller, EchoConfig
from media.pcm import StreamResampler
from media.vad import SileroDetector

PULL = 480  # 20 ms at 24 kHz: a frame as the framer hands it out
REPLY = [
    "Tomorrow will be cloudy with a chance of rain in the evening, so take an umbrella.",
    "The nearest charging station is four kilometres ahead on the right hand side.",
    "Your next meeting starts at half past two and lasts for about forty five minutes.",
]
SAID = [  # said over the reply, each in its own voice
    ("Hang on a second.", "en-us+f2"),
    ("Could you repeat that?", "en-gb+m1"),
    ("Hey, listen to me.", "en-us+f4"),
    ("That's not right.", "en-gb-scotland"),
    ("One more thing.", "en-us+m5"),
    ("No, the other one.", "en-us+f2"),
]
ROOMS = [(200, -6, 50), (80, -15, 30), (300, -8, 70)]  # delay ms, gain dB, sox's reverberance


@pytest.fixture(scope="module")
def reply() -> np.ndarray:
    """The agent's reply at 24 kHz, half a second between its sentences (AEC3 leaks after a pause)."""
    gap = np.zeros(12_000, np.float32)
    return np.concatenate([part for text in REPLY for part in (espeak_rendering(text, "en-gb", 24_000), gap)])


@pytest.fixture(scope="module")
def impulses(tmp_path_factory) -> dict[int, np.ndarray]:
    tmp = tmp_path_factory.mktemp("rooms")
    return {reverb: room_impulse(tmp, reverb, rate=16_000) for _, _, reverb in ROOMS}


def microphone(reply24: np.ndarray, ir: np.ndarray, delay_ms: int, gain_db: float) -> np.ndarray:
    rs = StreamResampler(24_000, 16_000, quality="HQ")
    far = np.concatenate([rs.process(reply24), rs.process(np.zeros(0, np.float32), last=True)])
    ir = ir / np.sqrt(np.dot(ir, ir)) * 10 ** (gain_db / 20)
    wet = np.convolve(far, ir)[: far.size]
    d = delay_ms * 16
    n = (far.size + d) // TICK * TICK
    mic = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 3e-4
    mic[d:] += wet[: n - d]
    return mic


ON = EchoConfig(double_talk=DoubleTalkConfig())


def listen(reply24: np.ndarray, mic: np.ndarray, config: EchoConfig = ON) -> tuple[list[bool], list[bool]]:
    """Each tick's `voice_over_echo`, and whether the cascade's VAD heard speech in what the canceller left (not
    marked as the echo alone), the reference fed as the session feeds it (20 ms frames before each tick)."""
    aec, vad = EchoCanceller(config), SileroDetector()
    played = np.zeros(max(mic.size * 3 // 2 + 4 * PULL, reply24.size), np.float32)
    played[: reply24.size] = reply24
    cue, heard = [], []
    for t in range(0, mic.size, TICK):
        for k in range(4):
            s = t * 3 // 2 + k * PULL
            aec.played((np.clip(played[s : s + PULL], -1, 1) * 32767).astype(np.int16))
        out = aec.clean(mic[t : t + TICK])
        cue.append(aec.voice_over_echo)
        heard.append(vad(out) and not aec.echo_only)
    assert aec.stats.voiced_ticks == sum(cue)
    return cue, heard


@pytest.fixture(scope="module")
def rooms(reply, impulses) -> dict[tuple[int, int, int], np.ndarray]:
    return {room: microphone(reply, impulses[room[2]], *room[:2]) for room in ROOMS}


def after(marked: list[bool], onset: int) -> float | None:
    """Milliseconds from the onset (a sample) to the end of the first marked tick from it."""
    return next(((t + 1) * TICK / 16 - onset / 16 for t in range(onset // TICK, len(marked)) if marked[t]), None)


@pytest.fixture(scope="module")
def onsets(reply, rooms) -> dict[tuple[int, int, int], list[tuple[float | None, float | None]]]:
    """For each room and each phrase said over the reply: how long after its onset a tick was taken for speech,
    by VAD alone and by VAD or the onset cue (at the tick's end; None: not within a second and a half)."""
    found = {}
    for room, mic0 in rooms.items():
        found[room] = []
        for i, (text, voice) in enumerate(SAID):
            user = espeak_rendering(text, voice, 16_000).astype(np.float32)
            user *= 0.4 / np.abs(user).max()
            onset = int((2.2 + 1.3 * i) * 16_000) + 317 * i  # past the canceller's first second, at any phase
            first = int(np.flatnonzero(np.abs(user) > 0.02)[0])
            mic = mic0.copy()
            mic[onset - first : onset - first + user.size] += user[: mic.size - onset + first]
            cue, heard = listen(reply, mic[: (onset + 24_000) // TICK * TICK])
            either = [c or h for c, h in zip(cue, heard, strict=True)]
            found[room].append((after(heard, onset), after(either, onset)))
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_the_agents_echo_alone_is_no_voice(reply, rooms, room):
    """Fails with either cue alone: the canceller's output rising is also AEC3 letting the echo through (after
    the reply's pauses: 26 and 54 ticks in the first and last rooms), and the microphone above what the echo
    could be is also the echo's odd band (33-47 ticks in each)."""
    cue, _ = listen(reply, rooms[room])
    settled = cue[int(1.5 * 16_000) // TICK :]  # AEC3's first second and a half: converging, VAD's to judge
    print(f"{room}: {sum(settled)} of {len(settled)} ticks of the echo alone taken for a voice")
    # the long, ringing room (300 ms, reverberance 70) leaks a few that both cues take for a voice
    assert sum(settled) <= 0.03 * len(settled)


def test_speech_over_the_echo_is_heard_at_its_onset(onsets):
    """Fails without the detector (`EchoConfig()`, the default: VAD alone, the two columns the same): over the echo
    VAD hears some of these phrases 400-960 ms after their onset, or not within the next second and a half."""
    for room, found in onsets.items():
        print(f"{room}: VAD alone / with the onset cue, ms after the onset: {found}")
    pairs = [pair for found in onsets.values() for pair in found]
    alone = [1500 if ms is None else ms for ms, _ in pairs]  # unheard: as if heard at the window's end
    with_cue = [1500 if ms is None else ms for _, ms in pairs]
    assert max(with_cue) < 1500, "a phrase over the echo went unheard"
    assert sum(c < a for a, c in zip(alone, with_cue, strict=True)) >= 4  # a tick or more sooner
    # (AEC3's and Silero's figures vary a tick from run to run, and a phrase in the ringing rooms by several: the
    # mean, not each phrase, is asserted; it was 58-110 ms sooner over seven runs, 0 without the detector)
    assert float(np.mean(with_cue)) <= float(np.mean(alone)) - 40


def test_a_voice_with_no_echo_to_explain_it_is_one_and_silence_is_not():
    """The detector alone: nothing played and nothing heard is no voice; then a voice with the reference silent
    is one as soon as the canceller's output rises over its floor for two frames."""
    rng = np.random.default_rng(1)
    dt = DoubleTalk()
    quiet = rng.standard_normal((8, 160)).astype(np.float32) * 10
    silent = np.zeros((8, 160), np.int16)
    assert not any(dt.tick(silent, quiet, quiet, 200) for _ in range(10))
    voice = np.sin(np.arange(8 * 160) * 2 * np.pi * 300 / 16_000).reshape(8, 160).astype(np.float32) * 8000
    assert dt.tick(silent, voice, voice, 200)


def test_off_by_default_no_tick_is_marked(reply, rooms):
    user = espeak_rendering("Hang on a second.", "en-us+f2", 16_000).astype(np.float32)
    mic = rooms[ROOMS[0]].copy()
    mic[3 * 16_000 : 3 * 16_000 + user.size] += user * np.float32(0.4 / np.abs(user).max())
    cue, heard = listen(reply, mic, EchoConfig())
    assert not any(cue) and any(heard)
