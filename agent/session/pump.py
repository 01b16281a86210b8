"""SessionPump: one conversation between a transport and an engine, whichever way it came in.

The asyncio adapter around the sans-I/O parts. Input is aligned onto the
80 ms clock (`FrameAligner`) and waits in a bounded `ChunkQueue` to be fed to
the engine; the engine's events are read in order: speech goes to the
output framer (generated speech only a little ahead of playback, so a
barge-in has little to throw away), the rest becomes session messages.
Every message to the client passes `emit`: recorded in the transcript,
counted, and handed to the transport, which writes it in its own protocol.
A turn whose engine falls silent for the turn deadline is cut.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np

from agent.config import MediaConfig
from agent.engines.base import (
    EngineSession,
    Error,
    SpeechFrame,
    TextDelta,
    ToolCall,
    TranscriptDelta,
    TurnEnd,
)
from agent.session.transcripts import TranscriptLog
from agent.session.turns import TurnTracker
from agent.wire import messages as wire
from media.aligner import AlignedChunk, AlignerConfig, AudioInput, FrameAligner, VideoInput
from media.av_convert import to_rgb
from media.chunk_queue import ChunkQueue
from media.double_talk import DoubleTalkConfig
from media.early_hold import WATCH_SCORE, Listening
from media.echo_cancel import EchoCanceller, EchoConfig
from media.framer import OutputFramer
from media.turn_taking import Floor

log = logging.getLogger(__name__)
T = TypeVar("T")
NO_AUDIO = np.zeros(0, np.float32)
Send = Callable[[wire.ServerMessage], None]

# What a session counts, summed over sessions by the server's /metrics.
ALIGNER_COUNTERS = (
    "audio_samples_dropped",
    "audio_samples_filled",
    "audio_reordered",
    "audio_resets",
    "audio_garbage_samples",
    "video_frames",
    "video_dropped",
    "video_repeated",
    "video_blended",
    "video_missing",
    "video_resyncs",
    "video_duplicates",
    "video_late",
)


class SessionObserver(Protocol):
    """What the server above learns of a session: each finished turn's figures, each error sent."""

    def turn_done(self, session_id: str, figures: wire.Metrics) -> None: ...

    def error_sent(self, code: str) -> None: ...


class SessionPump:
    def __init__(
        self,
        session_id: str,
        engine: EngineSession,
        send: Send,
        live_output: bool,
        media: MediaConfig | None = None,
        observer: SessionObserver | None = None,
        transcript: TranscriptLog | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        cfg = media or MediaConfig()
        self.id = session_id
        self.engine = engine
        self.send = send
        self.observer = observer
        self.transcript = transcript
        self.live_output = live_output
        self.clock = clock
        # Pictures come from the decoder thinned to twice the video rate (media.rtc.video_decoding); an instant
        # between two takes the one before it: blending them cost the loop two conversions and a float mix of
        # each picture (echo, 24 camera sessions on a core: underruns), for a ghost of both.
        aligner = AlignerConfig(video_fps=cfg.video_fps, max_video_pixels=cfg.max_video_pixels, video_blend_span_s=0.0)
        self.aligner = FrameAligner(aligner, to_rgb)
        self.queue = ChunkQueue(capacity=cfg.queue_ticks)
        self.framer = (
            OutputFramer(max_backlog_ms=cfg.live_backlog_max_ms, trim_above_ms=cfg.live_backlog_ms)
            if live_output
            else OutputFramer(max_backlog_ms=cfg.output_backlog_ms)
        )
        self.lead_ms = cfg.output_lead_ms
        # The agent's voice out of the input before anything listens to it, with what the framer sent as the
        # reference; off for a client that cancels it itself (`client_cancels_echo`) and for an engine whose
        # speech is the user's own audio played back (the echo engine).
        self.echo_mode = cfg.echo_cancellation
        self.echo: EchoCanceller | None = None
        if self.echo_mode != "off" and not getattr(engine, "repeats_input", False):
            onset = DoubleTalkConfig() if cfg.echo_onset else None
            echo = EchoConfig(double_talk=onset, linear_heard=cfg.linear_heard)
            self.echo = EchoCanceller(echo, played_rate=self.framer.rate)
            self.framer.listener = self.echo.played
        self.turns = TurnTracker()
        # Speech over the reply holds it while it is judged (media/turn_taking.py): the framer plays silence
        self.floor: Floor | None = getattr(engine, "floor", None)
        self.framer.floor = self.floor
        self.listening = Listening(self.echo, self.floor)
        self.early_hold = cfg.early_hold and self.floor is not None and self.floor.barge_in
        self._floor_at_turn = (0, 0, 0)  # the floor's interruptions, resumptions, continuations as this turn began
        self.tick = -1  # the last tick fed to the engine
        self._fed_at: deque[tuple[int, float]] = deque(maxlen=64)  # recent ticks and when they were fed
        self._wake = asyncio.Event()
        self._assistant_text = ""
        self.turn_deadline_s = cfg.turn_deadline_s
        self._deadline: asyncio.TimerHandle | None = None
        self._last_event = 0.0  # when the engine last sent anything: the deadline counts its silence
        self._events: asyncio.Task[None] | None = None
        self._restart = False
        self.text_only_asked = False
        self.echo_failed = False
        self.transport_counters: Callable[[], dict[str, float]] = dict  # set by the transport: what it dropped
        self.transport_gauges: Callable[[], dict[str, float]] = dict  # ... and its state now (the jitter buffer's)
        self._reply_from: int | None = None  # the framer's speech frames out when this reply's first came in
        engine.played_ms = self.played_ms

    # ---- from the transport and the client ----

    def push_audio(self, audio: AudioInput) -> None:
        """Audio as the transport got it; MediaError if it cannot be used."""
        for chunk in self.aligner.push_audio(audio):
            self.push_chunk(chunk)
        if self.early_hold:
            sounding = self._reply_from is not None  # nothing to hold otherwise: the tick in progress is not read
            tick, so_far = self.aligner.in_progress() if sounding else (-1, NO_AUDIO)
            self._cancelling(lambda: self.listening.arrived(tick, so_far, sounding))

    def push_video(self, video: VideoInput) -> None:
        self.aligner.push_video(video)

    def client_cancels_echo(self) -> None:
        """The client cancels the agent's voice itself (a browser's canceller): unless the config says "on",
        none here."""
        if self.echo_mode == "auto":
            self._no_canceller()

    def push_chunk(self, chunk: AlignedChunk) -> None:
        talking = self.floor is not None and self.floor.held
        chunk = self._cancelling(lambda: self.listening.tick(chunk, talking)) or chunk
        self.queue.push(chunk)
        self._wake.set()

    def _cancelling(self, work: Callable[[], T]) -> T | None:
        """`work` with the canceller in it: if its library fails, the session goes on without it (said once)."""
        try:
            return work()
        except Exception as exc:
            if self.echo is None:
                raise
            log.error("session %s: echo cancellation failed, going on without it: %r", self.id, exc)
            self.echo_failed = True
            self._no_canceller()
            return None

    def _no_canceller(self) -> None:
        self.echo = self.listening.echo = None
        self.framer.listener = None

    async def _make_early_detector(self) -> None:
        """A detector of the kind the engine's ticks are judged by (an engine that loads no Silero gets none here),
        made off the loop (Silero: 60-100 ms); until then, ticks only."""
        from media.vad import SileroDetector

        assert self.floor is not None
        kind = self.floor.detector_kind
        try:
            if kind is SileroDetector:
                made = await asyncio.get_running_loop().run_in_executor(None, SileroDetector, WATCH_SCORE)
            else:  # a kind it can make and start afresh (EnergyDetector), or none
                made = kind() if kind is not None and hasattr(kind, "reset") else None
            self.listening.detector = made
        except Exception as exc:  # noqa: BLE001 (a library that cannot load: the ticks still hold the reply)
            log.error("session %s: no voice detector for speech over a reply as it arrives: %r", self.id, exc)

    def send_text(self, text: str) -> None:
        self.engine.send_text(text)

    def interrupt(self) -> None:
        """The client asked to stop: silence within one 20 ms packet."""
        self.engine.interrupt()
        self.framer.flush()

    def played_ms(self) -> float:
        """How much of the current reply the transport has sent (the engine's `played_ms`): its speech frames
        pulled from the framer since its first came in; held frames and silence not counted."""
        if self._reply_from is None:
            return 0.0
        frame_ms = 1000 * self.framer.frame_samples / self.framer.rate
        return (self.framer.stats.speech_frames - self._reply_from) * frame_ms

    def ask_text_only(self) -> None:
        """The client asked for replies in text only (the offer's `text_only`): for good, whatever the load."""
        self.text_only_asked = True
        self.engine.text_only = True

    def set_load(self, shed_video: bool, text_only: bool) -> None:
        """The server's overload policy: drop all video; answer new turns in text only."""
        self.queue.shed_video = shed_video
        self.engine.text_only = text_only or self.text_only_asked

    def emit(self, msg: wire.ServerMessage) -> None:
        """One message to the client, whoever made it (the pump, the transport): recorded, counted, sent."""
        if self.transcript is not None:
            self.transcript.record(wire.to_wire(msg))
        if self.observer is not None:
            if isinstance(msg, wire.Metrics):
                self.observer.turn_done(self.id, msg)
            elif isinstance(msg, wire.Error):
                self.observer.error_sent(msg.code)
        self.send(msg)

    # ---- what it counted ----

    def counters(self) -> dict[str, float]:
        """Cumulative counts, flattened; the server sums them over live and ended sessions."""
        out: dict[str, float] = {f"aligner_{k}": getattr(self.aligner.stats, k) for k in ALIGNER_COUNTERS}
        out["ring_audio_dropped"] = self.queue.audio.stats.dropped
        out["ring_video_dropped"] = self.queue.video.stats.dropped
        out["ring_video_shed"] = self.queue.video_shed
        out["output_underruns"] = self.framer.stats.underruns
        out["output_dropped_samples"] = self.framer.stats.dropped_samples
        out["output_flushed_samples"] = self.framer.stats.flushed_samples
        out["output_trimmed_samples"] = self.framer.stats.trimmed_samples
        out["output_frames"] = self.framer.stats.frames
        out["output_held_frames"] = self.framer.stats.held_frames
        if self.floor is not None:
            out["interruptions"] = self.floor.interruptions
            out["interruptions_resumed"] = self.floor.resumed
            out["interruptions_confirmed"] = self.floor.confirmed
            out["interruptions_continued"] = self.floor.continued
            out["interruptions_blips"] = self.floor.blips
            out["interruptions_early"] = self.floor.early
            out["interruptions_early_released"] = self.floor.early_released
            out["held_words_weighed"] = self.floor.weighed
            out["held_words_weighed_backchannel"] = self.floor.weighed_backchannel
            out["held_words_weighed_stop"] = self.floor.weighed_stop
            out["held_words_unread"] = self.floor.unread
        if self.echo is not None:
            e = self.echo.stats
            out.update(
                echo_frames=e.frames,
                echo_skipped_frames=e.skipped_frames,
                echo_reference_frames=e.echo_frames,
                echo_in_energy=e.echo_in_energy,
                echo_out_energy=e.echo_out_energy,
                echo_reference_padded=e.reference_padded,
                echo_reference_dropped=e.reference_dropped,
                echo_delay_estimates=e.delay_estimates,
                echo_bypassed_frames=e.bypassed_frames,
                echo_unvoiced_ticks=e.unvoiced_ticks,
                echo_voiced_ticks=e.voiced_ticks,
                echo_linear_frames=e.linear_frames,
                echo_linear_failures=e.linear_failures,
                echo_seconds=e.seconds,
            )
        out["echo_failures"] = int(self.echo_failed)
        out["early_hold_seconds"] = self.listening.seconds
        out.update((f"engine_{k}", v) for k, v in self.engine.counters().items())
        out.update((f"transport_{k}", v) for k, v in self.transport_counters().items())
        return out

    def occupancy(self) -> tuple[int, int]:
        """Audio and video items queued now."""
        return len(self.queue.audio), len(self.queue.video)

    # ---- loops ----

    async def run(self) -> None:
        making = None
        if self.early_hold and self.listening.detector is None:
            making = asyncio.create_task(self._make_early_detector())
        feed = asyncio.create_task(self._feed_loop())
        feed.add_done_callback(lambda t: t.cancelled() or t.exception() is None or self._events.cancel())
        try:
            while True:
                self._events = asyncio.create_task(self._event_loop())
                try:
                    await self._events
                    return  # the engine closed its event stream
                except asyncio.CancelledError:
                    if not self._restart:
                        raise
                    self._restart = False  # a hung turn was cut: read the engine's events afresh
        finally:
            feed.cancel()
            if making is not None:
                making.cancel()
            self._disarm_deadline()
            if not feed.cancelled() and feed.done() and feed.exception() is not None:
                raise feed.exception()  # type: ignore[misc]

    async def _feed_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while (chunk := self.queue.pop()) is not None:
                self.tick = chunk.tick
                self._fed_at.append((chunk.tick, self.clock()))
                self.engine.feed(chunk)

    async def _event_loop(self) -> None:
        async for ev in self.engine.events():
            now = self._last_event = self.clock()
            if isinstance(ev, SpeechFrame):
                if not self.live_output:
                    ahead = self.framer.backlog_ms - self.lead_ms
                    if ahead > 0:
                        await asyncio.sleep(ahead / 1000)
                if self._reply_from is None:
                    self._reply_from = self.framer.stats.speech_frames
                self.framer.push(ev.pcm)
                self._emit(self.turns.speech(self.clock()))
            elif isinstance(ev, TranscriptDelta):
                if ev.role == "user":
                    if ev.final:
                        start = self._fed_time(ev.end_tick, now)
                        msgs = self.turns.user_final(start, ev.text, ev.end_tick, ev.speech_end_tick, ev.extra)
                        if self.floor is not None:
                            self._floor_at_turn = self._floor_counts()
                        self._arm_deadline()
                    else:
                        msgs = self.turns.user_partial(ev.text, ev.extra)
                else:
                    msgs = self.turns.assistant_text(now, ev.text, ev.final, ev.extra)
                    if ev.final:
                        self._assistant_text = ""
                self._emit(msgs)
            elif isinstance(ev, TextDelta):
                self._assistant_text += ev.text
                self._emit(self.turns.assistant_text(now, self._assistant_text, False))
            elif isinstance(ev, TurnEnd):
                if ev.interrupted:
                    self.framer.flush()
                else:
                    self.framer.end_of_speech()
                    if self.framer.backlog_ms > 0:  # let the reply finish playing
                        await asyncio.sleep(self.framer.backlog_ms / 1000)
                self._assistant_text = ""
                self._reply_from = None
                self._disarm_deadline()
                self._emit(self.turns.turn_end(ev.interrupted, {**ev.stages, **self._floor_figures()}))
            elif isinstance(ev, ToolCall):
                self._emit([wire.ToolRun(ev.name, ev.arguments, ev.result)])
            elif isinstance(ev, Error):
                log.warning("engine error %s: %s", ev.code, ev.message)
                self._emit([wire.Error("engine", f"{ev.code}: {ev.message}")])

    def _floor_figures(self) -> dict[str, float | str]:
        """Speech over this turn's reply: how often, how often it was not meant (the reply went on), and how often
        it was the user going on with this turn (`continuation_ms`)."""
        if self.floor is None:
            return {}
        now, then = self._floor_counts(), self._floor_at_turn
        self._floor_at_turn = now
        keys = ("interruptions", "interruptions_resumed", "interruptions_continued")
        return {k: a - b for k, a, b in zip(keys, now, then, strict=True)}

    def _floor_counts(self) -> tuple[int, int, int]:
        f = self.floor
        return (0, 0, 0) if f is None else (f.interruptions, f.resumed, f.continued)

    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self._deadline = asyncio.get_running_loop().call_later(self.turn_deadline_s, self._turn_overdue)

    def _disarm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _turn_overdue(self) -> None:
        """The engine hung on this turn (sent nothing for the whole deadline): stop it, say so, listen again.
        A long reply that keeps streaming is not hung: the deadline moves on to its last event."""
        silent = self.clock() - self._last_event
        if silent < self.turn_deadline_s:
            self._deadline = asyncio.get_running_loop().call_later(self.turn_deadline_s - silent, self._turn_overdue)
            return
        self._deadline = None
        log.warning("engine gave no complete answer within %.0f s; turn cancelled", self.turn_deadline_s)
        self.engine.interrupt()
        self.framer.flush()
        self._emit([wire.Error("engine", f"no answer within {self.turn_deadline_s:g} s")])
        self._emit(self.turns.turn_end(True))
        if self._events is not None and not self._events.done():
            self._restart = True  # the engine may be stuck inside its event stream
            self._events.cancel()

    def _fed_time(self, tick: int | None, default: float) -> float:
        for t, at in self._fed_at:
            if t == tick:
                return at
        return default

    def _emit(self, messages: list[wire.ServerMessage]) -> None:
        for m in messages:
            self.emit(m)
