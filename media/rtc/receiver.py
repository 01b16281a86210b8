"""aiortc's RTCRtpReceiver tuned: our jitter buffer for audio, the audio decoded on the loop, the video decoded
in a process on idle CPU, the video bandwidth estimator made cheap; what they drop, counted."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from fractions import Fraction

import av
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpReceiver
from aiortc.codecs import get_decoder
from aiortc.codecs.base import Decoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from media.jitter import AdaptiveJitterBuffer, JitterStats, Slot
from media.opus import OpusDecoder, OpusError
from media.rtc import private
from media.rtc.jitter_buffer import ImmediateAudioBuffer, PassingAudioBuffer, SequencedFrame
from media.rtc.rate_estimator import MinFramePeriod, ThrottledRemb, WindowRate
from media.rtc.video_decoding import IdleVideoDecoder

log = logging.getLogger(__name__)
STALL_S = 0.02  # a give-up timer this late means the loop was busy (one frame)


class InlineAudioDecoder:
    """Decodes inbound audio on the event loop, standing in for the queue that
    feeds aiortc's per-receiver decoder thread.

    A 20 ms Opus packet decodes in ~0.04 ms (to mono: the aligner downmixes
    anyway); handing it to that thread and the frame back through
    `run_coroutine_threadsafe` cost ~0.12 ms more, 50 times a second a session
    (EPYC). With a `sink` each frame goes straight to it, not through the
    track's queue and a task that drains it. aiortc's thread still starts, reads
    from here and idles until the receiver stops; then it ends the track as
    before. Video is decoded in a process of its own (`media.rtc.video_decoding`).

    Opus packets that come with their sequence numbers (`PassingAudioBuffer`)
    go through the adaptive jitter buffer (`media.jitter`) and libopus itself
    (`media.opus.OpusDecoder`): a lost packet's slot is rebuilt from the next
    packet's FEC copy, or concealed, not left silent. A timer gives up a
    missing packet when the buffer says.
    """

    def __init__(self, receiver: RTCRtpReceiver, channels: int = 2) -> None:
        self._receiver = receiver  # its track (and the track's queue) comes with the remote description
        self._channels = channels
        self._stopped = threading.Event()
        self._decoder: Decoder | None = None
        self._codec: str | None = None
        self.sink: Callable[[av.AudioFrame], None] | None = None
        self.errors = 0
        self.buffer = AdaptiveJitterBuffer(carries_fec=OpusDecoder.carries_fec)
        self._opus: OpusDecoder | None = None
        self._time_base = Fraction(1, 48_000)
        self._timer: asyncio.TimerHandle | None = None
        self.recovered = 0  # lost packets rebuilt from the next one's FEC copy
        self.concealed = 0  # ... made up by concealment

    def _decoder_for(self, codec: RTCRtpCodecParameters) -> Decoder:
        decoder = get_decoder(codec)
        if codec.name.lower() == "opus" and self._channels == 1:
            decoder.codec.layout = "mono"  # type: ignore[attr-defined]
        return decoder

    def put(self, task: tuple[RTCRtpCodecParameters, JitterFrame] | None) -> None:
        if task is None:
            self._stopped.set()
            if self._timer is not None:
                self._timer.cancel()
            return
        codec, encoded = task
        if isinstance(encoded, SequencedFrame) and codec.name.lower() == "opus":
            if self._opus is None:
                self._opus = OpusDecoder(codec.clockRate, self._channels)
                self._time_base = Fraction(1, codec.clockRate)
            loop = asyncio.get_running_loop()
            self._play(self.buffer.push(encoded.sequence, encoded.timestamp, encoded.data, loop.time()), loop)
            return
        if self._decoder is None or codec.name != self._codec:
            self._decoder, self._codec = self._decoder_for(codec), codec.name
        try:
            frames = self._decoder.decode(encoded)
        except av.FFmpegError as exc:
            self.errors += 1
            log.debug("an inbound %s packet did not decode: %s", codec.name, exc)
            return
        for frame in frames:
            self._deliver(frame)

    def _deliver(self, frame: av.AudioFrame) -> None:
        if self.sink is not None:
            self.sink(frame)
        else:
            private.deliver(self._receiver.track, frame)

    def _poll(self, due: float, rechecked: bool = False) -> None:
        self._timer = None
        if self._stopped.is_set():
            return
        loop = asyncio.get_running_loop()
        if not rechecked and loop.time() - due > STALL_S:
            # the timer ran late, so the loop (or the process) was busy, and what came meanwhile is still queued
            # in the socket and the transport's tasks behind it: let that in before giving anything up
            self._timer = loop.call_later(STALL_S, self._poll, loop.time() + STALL_S, True)
            return
        self._play(self.buffer.poll(loop.time()), loop)

    def _play(self, slots: list[Slot], loop: asyncio.AbstractEventLoop) -> None:
        opus = self._opus
        assert opus is not None
        for slot in slots:
            pcm = None
            if slot.payload is not None:
                try:
                    pcm = opus.decode(slot.payload)
                except OpusError as exc:
                    self.errors += 1
                    log.debug("an inbound Opus packet did not decode: %s", exc)
            elif slot.following is not None and opus.carries_fec(slot.following):
                pcm = opus.recover(slot.following, slot.samples)
                self.recovered += 1
            if pcm is None:
                pcm = opus.conceal(slot.samples)
                self.concealed += 1
            frame = av.AudioFrame.from_ndarray(
                pcm.reshape(1, -1), format="flt", layout="mono" if self._channels == 1 else "stereo"
            )
            frame.sample_rate = opus.rate
            frame.pts = slot.timestamp
            frame.time_base = self._time_base
            self._deliver(frame)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.buffer.deadline()
        if due is not None:
            self._timer = loop.call_at(due, self._poll, due)

    def get(self) -> None:
        """aiortc's decoder thread: wait for the stop, then end the track."""
        self._stopped.wait()


def tune_receivers(pc: RTCPeerConnection, adaptive: bool = True, channels: int = 2, video_every_s: float = 0.0) -> None:
    """Swap aiortc's audio jitter buffer and decoder thread for ours; decode video in a process on idle CPU
    (IdleVideoDecoder: a picture back at most every `video_every_s`), count
    its bandwidth estimator's incoming rate in O(1) (WindowRate), take its frame-period minimum in C
    (MinFramePeriod) and send its estimates throttled (ThrottledRemb).

    aiortc releases an inbound audio packet only once 4 more have arrived:
    +80 ms on every receiving side (the echo click round trip was ~276 ms
    with it). Here a packet in order goes at once, and a missing one is waited
    for only as long as the line's jitter (`adaptive`, media.jitter); not
    `adaptive`, each is used on arrival (ImmediateAudioBuffer) and a lost one
    left to the aligner. Decoding moves onto the loop (InlineAudioDecoder), to
    `channels` (1: mono, for a peer that downmixes anyway). aiortc
    has no option for either, so both are swapped after the transceivers exist
    and before the receiver starts (its thread takes the queue at start).
    """
    for t in pc.getTransceivers():
        r = t.receiver
        if t.kind == "audio":
            buf = PassingAudioBuffer() if adaptive else ImmediateAudioBuffer()
            private.set_jitter_buffer(r, buf)
            private.set_decoder_queue(r, InlineAudioDecoder(r, channels))
        elif t.kind == "video":
            private.set_decoder_queue(r, IdleVideoDecoder(r, private.decoder_error(r), video_every_s))
            estimator = private.bitrate_estimator(r)
            if estimator is not None:
                estimator.incoming_bitrate = WindowRate(1000, 8000)  # what aiortc's builds
                estimator.estimator.update_min_frame_period = MinFramePeriod()
                private.set_bitrate_estimator(r, ThrottledRemb(estimator))


def audio_decoder(pc: RTCPeerConnection, track: MediaStreamTrack) -> InlineAudioDecoder | None:
    """The inline decoder feeding `track`, if its receiver was tuned."""
    for t in pc.getTransceivers():
        queue_ = private.decoder_queue(t.receiver)
        if t.receiver.track is track and isinstance(queue_, InlineAudioDecoder):
            return queue_
    return None


def inbound_counters(pc: RTCPeerConnection) -> dict[str, int]:
    """What the swapped receivers got, dropped or made up: audio packets; late or duplicated, lost (and of those,
    rebuilt from FEC or concealed), that waited for a missing one, that did not decode; video frames decoded,
    shed undecoded, that did not decode."""
    names = (
        "audio_packets",
        "audio_late_packets",
        "audio_lost_packets",
        "audio_fec_recovered_packets",
        "audio_concealed_packets",
        "audio_waiting_packets",
        "audio_undecodable_packets",
        "video_frames_decoded",
        "video_frames_shed",
        "video_undecodable_frames",
    )
    out = dict.fromkeys(names, 0)
    for t in pc.getTransceivers():
        queue_ = private.decoder_queue(t.receiver)
        if isinstance(queue_, InlineAudioDecoder):
            jitter, arrival = queue_.buffer.stats, private.jitter_buffer(t.receiver)
            out["audio_packets"] += jitter.packets + getattr(arrival, "packets", 0)
            out["audio_late_packets"] += jitter.late + getattr(arrival, "late", 0)
            out["audio_lost_packets"] += jitter.lost
            out["audio_fec_recovered_packets"] += queue_.recovered
            out["audio_concealed_packets"] += queue_.concealed
            out["audio_waiting_packets"] += jitter.waits
            out["audio_undecodable_packets"] += queue_.errors
        elif isinstance(queue_, IdleVideoDecoder):
            out["video_frames_decoded"] += queue_.decoded
            out["video_frames_shed"] += queue_.shed
            out["video_undecodable_frames"] += queue_.errors
    return out


def jitter_buffers(pc: RTCPeerConnection) -> list[JitterStats]:
    """The adaptive jitter buffers' state now (their target delay and depth), one per inbound audio stream."""
    return [
        q.buffer.stats
        for t in pc.getTransceivers()
        if isinstance(q := private.decoder_queue(t.receiver), InlineAudioDecoder) and q.buffer.stats.packets
    ]
