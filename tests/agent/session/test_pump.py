"""The session pump without a network: audio in, the echo engine's turn out, every message through `emit`."""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction

import numpy as np

from agent.config import MediaConfig
from agent.engines.echo import EchoEngine
from agent.profiles import get_profile
from agent.session.pump import SessionPump
from agent.session.transcripts import TranscriptLog
from agent.wire import messages as wire
from benchmarks.harness import wait_until
from media.aligner import AudioInput, VideoInput


class Observer:
    def __init__(self):
        self.turns, self.errors = [], []

    def turn_done(self, session_id, figures):
        self.turns.append((session_id, figures))

    def error_sent(self, code):
        self.errors.append(code)


def pcm16(seconds: float, loud: bool) -> np.ndarray:
    t = np.arange(int(seconds * 48_000)) / 48_000
    return ((0.4 * np.sin(2 * np.pi * 300 * t)) if loud else 0 * t).astype(np.float32)


async def test_a_turn_through_the_pump(tmp_path):
    engine = EchoEngine("turn", end_silence_ms=480)
    session = await engine.open_session(get_profile("default"))
    sent, observer = [], Observer()
    log = TranscriptLog(str(tmp_path), "s1")
    pump = SessionPump("s1", session, sent.append, False, MediaConfig(), observer, log)
    runner = asyncio.create_task(pump.run())
    audio = np.concatenate([pcm16(0.5, True), pcm16(1.0, False)])
    for start in range(0, audio.size, 960):  # 20 ms frames, as a transport delivers them
        part = audio[start : start + 960].reshape(1, -1)
        pump.push_audio(AudioInput(part, 48_000, start, Fraction(1, 48_000), "flt", 1))
    assert await wait_until(lambda: pump.framer.backlog_ms > 0, 10)  # the reply's speech is queued to play
    assert session.played_ms == pump.played_ms and pump.played_ms() == 0  # the engine reads what was played
    for _ in range(3):
        pump.framer.pull()
    assert pump.played_ms() == 3 * 20  # three 20 ms frames of the reply went out: counted, not timed
    while pump.framer.backlog_ms > 0:  # play it out, as the outbound track would
        pump.framer.pull()
        await asyncio.sleep(0.02)
    assert await wait_until(lambda: any(isinstance(m, wire.Metrics) for m in sent), 10)
    kinds = [type(m) for m in sent]
    assert kinds[0] is wire.Transcript and wire.State in kinds and kinds[-1] is wire.State
    ((sid, metrics),) = observer.turns
    assert sid == "s1" and metrics.figures["first_audio_ms"] is not None and metrics.figures["interrupted"] is False
    pump.emit(wire.Error("bad_request", "a transport's own error"))
    assert observer.errors == ["bad_request"] and sent[-1] == wire.Error("bad_request", "a transport's own error")
    assert pump.played_ms() == 0  # the turn ended: nothing of a next reply played yet
    counts = pump.counters()
    assert counts["output_frames"] > 0 and counts["aligner_audio_samples_dropped"] == 0
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    log.close("done")
    records = [json.loads(line)["type"] for line in log.path.read_text().splitlines()]
    assert records[0] == "session" and "metrics" in records and "error" in records and records[-1] == "end"


async def test_load_settings_reach_the_queue_and_the_engine():
    session = await EchoEngine("turn").open_session(get_profile("default"))
    pump = SessionPump("s2", session, lambda m: None, False)
    picture = np.zeros((48, 64, 3), np.uint8)

    def half_a_second(start: float) -> list:
        """Camera frames every 0.1 s and audio for 0.5 s from `start`: what the engine would be fed."""
        for k in range(5):
            pts = round((start + 0.1 * k) * 90_000)
            pump.push_video(VideoInput(picture, pts=pts, time_base=Fraction(1, 90_000)))
        samples = np.zeros((1, 8_000), np.float32)
        pump.push_audio(AudioInput(samples, 16_000, round(start * 16_000), Fraction(1, 16_000)))
        return list(iter(pump.queue.pop, None))

    pump.set_load(shed_video=True, text_only=True)
    assert pump.queue.shed_video and session.text_only
    shed = half_a_second(0.0)
    assert shed and not any(c.video for c in shed) and pump.counters()["ring_video_shed"] > 0
    pump.set_load(shed_video=False, text_only=False)
    assert not pump.queue.shed_video and not session.text_only
    assert any(c.video for c in half_a_second(0.5))  # the camera reaches the engine again


async def test_text_only_asked_by_the_client_outlasts_the_overload_policy():
    session = await EchoEngine("turn").open_session(get_profile("default"))
    pump = SessionPump("s3", session, lambda m: None, False)
    pump.ask_text_only()
    assert session.text_only
    pump.set_load(shed_video=False, text_only=False)  # the load falls: the client's wish stays
    assert session.text_only


async def test_an_instant_between_two_thinned_pictures_takes_the_one_before_not_a_blend():
    """The decoder hands back pictures 0.25 s apart (twice the 2 fps video rate): the aligner must not blend two
    of them for each instant that falls between, which costs the loop two conversions and a float mix."""
    session = await EchoEngine("turn").open_session(get_profile("default"))
    pump = SessionPump("s4", session, lambda m: None, False)
    picture = np.zeros((48, 64, 3), np.uint8)
    for i, at in enumerate((0.0, 0.3, 0.65, 0.95)):  # the instant at 0.5 s falls between two
        pump.push_video(VideoInput(picture + 60 * i, pts=round(at * 90_000), time_base=Fraction(1, 90_000)))
    pump.push_audio(AudioInput(np.zeros((1, 16_000), np.float32), 16_000, 0, Fraction(1, 16_000)))  # 1 s
    stats = pump.aligner.stats
    assert stats.video_sampled >= 2 and stats.video_blended == 0


async def test_the_onset_cue_is_the_configs_to_turn_on():
    """`media.echo_onset` reaches the session's echo canceller: off by default, the double-talk detector when on,
    and the pump hands the engine the canceller's mark with each tick (`AlignedChunk.voice`)."""
    session = await EchoEngine("turn").open_session(get_profile("default"))
    session.repeats_input = False  # an engine whose speech is its own: the canceller runs for it
    plain = SessionPump("s4", session, lambda m: None, False)
    assert plain.echo is not None and plain.echo.config.double_talk is None
    pump = SessionPump("s5", session, lambda m: None, False, MediaConfig(echo_onset=True))
    assert pump.echo is not None and pump.echo.config.double_talk is not None
    pump.echo.clean = lambda audio, talking=False: audio  # what the canceller left; its mark is what is checked
    pump.echo.voice_over_echo = True
    pump.push_audio(AudioInput(np.zeros((1, 1280), np.float32), 16_000, 0, Fraction(1, 16_000)))
    chunk = pump.queue.pop()
    assert chunk is not None and chunk.voice


async def test_speech_over_a_sounding_reply_holds_it_before_its_tick_is_whole():
    """`media.early_hold`: the tick in progress is listened to as each 20 ms packet comes; a voice over the reply
    silences it from the next frame, not once its 80 ms tick is whole; the tick's judgement then keeps the hold."""
    from tests.media.test_early_hold import Loud

    session = await EchoEngine("turn", end_silence_ms=480).open_session(get_profile("default"))
    pump = SessionPump("s6", session, lambda m: None, False, MediaConfig())
    assert pump.early_hold and pump.floor is not None
    pump.listening.detector = Loud()  # the pump makes Silero off the loop; a loudness test stands in here
    runner = asyncio.create_task(pump.run())
    at = 0

    def send(seconds: float, loud: bool) -> None:
        nonlocal at
        audio = pcm16(seconds, loud)
        for start in range(0, audio.size, 960):
            part = audio[start : start + 960].reshape(1, -1)
            pump.push_audio(AudioInput(part, 48_000, at, Fraction(1, 48_000), "flt", 1))
            at += part.shape[1]

    send(0.5, True)
    send(1.02, False)  # the turn ends; a tick begins
    assert await wait_until(lambda: pump.framer.backlog_ms > 0, 10)
    assert pump.framer.pull().samples.any()  # the reply sounds
    send(0.02, True)  # the user speaks over it, at the start of a tick
    tick, so_far = pump.aligner.in_progress()
    assert 0 < so_far.size < 1280 and pump.floor.held and pump.floor.early_tick == tick  # the tick is not whole
    assert not pump.framer.pull().samples.any()  # silent from the next frame
    send(0.08, True)  # the tick is whole and voiced: the hold is the tick's own now
    assert await wait_until(lambda: pump.floor.early_tick is None, 5)
    assert pump.floor.held and pump.counters()["interruptions_early"] == 1
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)


async def test_the_early_hold_hears_with_the_kind_of_detector_the_ticks_are_judged_by():
    """The echo engine judges ticks by energy: its sessions load no Silero for the early hold (150 MB of RSS in the
    soak, per server). A live echo takes no turns: nothing holds it."""
    from media.endpoint import EnergyDetector

    session = await EchoEngine("turn").open_session(get_profile("default"))
    pump = SessionPump("s7", session, lambda m: None, False)
    runner = asyncio.create_task(pump.run())
    assert await wait_until(lambda: pump.listening.detector is not None, 5)
    assert type(pump.listening.detector) is EnergyDetector
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    live = await EchoEngine("stream").open_session(get_profile("default"))
    assert not SessionPump("s8", live, lambda m: None, True).early_hold
