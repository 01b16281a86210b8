"""The agent's speech to the peer: one 20 ms Opus packet per 20 ms, written below aiortc's sender.

Every session's packets leave from one 20 ms timer on the loop (`SpeechTicker`)
rather than from a task per session that aiortc's sender wakes for each
packet: at 16 sessions that was 800 sleeps, task steps and four-coroutine
descents to the socket a second. A frame is taken from the framer only
when it is due, so speech that arrived meanwhile makes that very packet.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable

from aiortc import RTCRtpTransceiver

from media.framer import OutputFramer
from media.opus import SpeechEncoder
from media.pacer import Pacer
from media.rtc.rtp_sender import PlaceholderTrack, RtpStream, ice_route

log = logging.getLogger(__name__)

OPUS_CLOCK = 48_000  # RTP clock of Opus at any sampling rate (RFC 7587)


class OutboundSpeech:
    """One session's speech: framer -> Opus (media/opus.py) -> RTP -> SRTP -> the ICE pair's socket.

    aiortc's sender keeps a `PlaceholderTrack` (it negotiates the stream and
    sends RTCP; its sender reports carry our counts) and sends nothing itself.
    When that sender first asks the track for media (the transport is up), the
    session joins the loop's SpeechTicker.
    """

    def __init__(self, framer: OutputFramer, max_lag: float = 0.1) -> None:
        self.framer = framer
        self.track = PlaceholderTrack("audio", on_sending=self._sending)
        self.pacer = Pacer.speech(framer.frame_samples / framer.rate, max_lag)
        self._encoder = SpeechEncoder(framer.rate)
        self._transceiver: RTCRtpTransceiver | None = None
        self.stream: RtpStream | None = None
        self.on_fault: Callable[[Exception], None] = lambda exc: None

    @property
    def late_resets(self) -> int:
        return self.pacer.late_resets

    def attach(self, transceiver: RTCRtpTransceiver, on_fault: Callable[[Exception], None]) -> None:
        """Send on `transceiver`, whose sender holds `track`; `on_fault` if sending fails."""
        self._transceiver = transceiver
        self.on_fault = on_fault

    def _sending(self) -> None:
        if self._transceiver is None:
            raise RuntimeError("OutboundSpeech.attach() was not called")
        self.stream = RtpStream(self._transceiver)
        SpeechTicker.of_running_loop().add(self)

    def close(self) -> None:
        """Stop sending; frees the encoder's threads now rather than at some later collection."""
        SpeechTicker.of_running_loop().discard(self)
        self.track.stop()
        self._encoder.close()

    def send_due(self, now: float) -> None:
        """The frames due by the tick at `now`; ConnectionError once the peer's transport has closed."""
        assert self.stream is not None and self._transceiver is not None
        n = self.pacer.due(now)
        if not n:
            return
        transport, addr = ice_route(self.stream.dtls)
        scale = OPUS_CLOCK // self.framer.rate
        for _ in range(n):
            out = self.framer.pull()
            payload = self._encoder.encode(out.samples, out.pts)
            transport.sendto(self.stream.protected(payload, True, out.pts * scale), addr)
        self.stream.report_to(self._transceiver.sender)


class SpeechTicker:
    """One timer per event loop that sends every session's due speech.

    The 20 ms period is cut into `SLOTS` ticks, and a session joins the least
    busy one: its packets leave on a phase of that slot, not all sessions' in
    one burst (the loop would do nothing else for that burst, and every
    session's next packet would wait for one shared moment). Sessions are
    paced on the ticks' nominal times, a fixed grid that a late or stalled
    loop does not move: a session's schedule, set by its first tick, stays
    centred on its slot's ticks (were the grid to drift to half a frame off it,
    a tick's jitter would decide between 0 and 2 frames, and a late tick
    between 1 and 3: gaps of 40-60 ms). After a stall the missed ticks of the
    last period run at once and whole periods before it are skipped. A
    session whose sending raises ends alone (its `on_fault`); one whose peer
    has closed is dropped quietly (the session ends by its own path). The
    timer stops with the last session.
    """

    PERIOD = 0.02
    SLOTS = 4
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SpeechTicker] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.clock = clock
        self.slots: list[dict[OutboundSpeech, None]] = [{} for _ in range(self.SLOTS)]
        self._slot = 0  # the next tick's
        self._handle: asyncio.TimerHandle | None = None
        self._next = 0.0

    @classmethod
    def of_running_loop(cls) -> SpeechTicker:
        loop = asyncio.get_running_loop()
        ticker = cls._by_loop.get(loop)
        if ticker is None:
            ticker = cls._by_loop[loop] = cls(loop)
        return ticker

    def __len__(self) -> int:
        return sum(map(len, self.slots))

    def add(self, outbound: OutboundSpeech) -> None:
        min(self.slots, key=len)[outbound] = None
        if self._handle is None:
            self._next = self.clock()
            self._handle = self.loop.call_later(0, self._tick)

    def discard(self, outbound: OutboundSpeech) -> None:
        for slot in self.slots:
            slot.pop(outbound, None)
        if not len(self) and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        now, nominal = self.clock(), self._next
        slot = self.slots[self._slot]
        self._slot = (self._slot + 1) % self.SLOTS
        for outbound in list(slot):
            try:
                outbound.send_due(nominal)
            except ConnectionError:
                del slot[outbound]
            except Exception as exc:  # a bug or a broken stream ends that session, not every session's speech
                log.error("speech output failed: %r", exc, exc_info=exc)
                del slot[outbound]
                outbound.on_fault(exc)
        if not len(self):
            self._handle = None
            return
        self._next += self.PERIOD / self.SLOTS
        behind = now - self._next
        if behind > self.PERIOD:  # whole periods: each slot keeps its phase
            self._next += (behind // self.PERIOD) * self.PERIOD
        self._handle = self.loop.call_later(self._next - now, self._tick)

    @property
    def running(self) -> bool:
        return self._handle is not None
