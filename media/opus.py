"""Opus encoding for the outbound speech, on the event loop.

aiortc's path for an `av.AudioFrame` cost ~0.45 ms of CPU per 20 ms frame
(EPYC): it resamples our 24 kHz mono to 48 kHz stereo, encodes 96 kbit/s
stereo in a thread-pool executor (a thread hand-off each way) and measures the
audio level in pure Python. Opus codes 24 kHz mono directly (a receiver
decodes a mono packet at whatever layout it negotiated), at a rate made for
speech; its packets leave as RTP below aiortc's sender (media/rtc/speech_out.py).
~0.1 ms.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

SPEECH_BIT_RATE = 48_000  # mono speech: transparent well below this
SPEECH_COMPLEXITY = 5  # of 10: half the CPU of 10; what WebRTC uses on phones


def opus_encoder(
    rate: int, layout: str = "mono", bit_rate: int = SPEECH_BIT_RATE, options: dict[str, str] | None = None
) -> av.AudioCodecContext:
    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate = bit_rate
    codec.format = "s16"
    codec.layout = layout
    codec.sample_rate = rate
    codec.time_base = Fraction(1, rate)
    codec.options = options if options is not None else {"compression_level": str(SPEECH_COMPLEXITY)}
    return codec


class SpeechEncoder:
    """One 20 ms int16 mono frame in, its Opus packet's bytes out (libopus gives exactly one a frame).

    The sender stamps the packet with the frame's pts, so the RTP timestamp
    follows the framer's steady clock, not the encoder's look-ahead. An agent is silent most of the
    time (it listens): once digital silence has been encoded `SETTLE` frames in
    a row (the encoder's look-ahead has flushed the speech before it), that
    packet is sent again without encoding (66 us saved a frame) until speech
    resumes. (3 bytes from a fresh encoder; after speech libopus settles on
    ~100 bytes that decode to a faint residue, about -57 dBFS.)

    Each encoder holds threads while it lives (PyAV cuts frames to the codec's
    size through a filter graph, whose thread pool FFmpeg sizes by the CPUs):
    `close()` frees them when the session ends rather than at some later
    garbage collection.
    """

    SETTLE = 3

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._codec = opus_encoder(rate)
        self._silent_run = 0
        self._silence: bytes | None = None
        self.encoded = 0  # frames that went through the encoder

    def close(self) -> None:
        self._codec = None  # type: ignore[assignment]

    def encode(self, samples: np.ndarray, pts: int) -> bytes:
        silent = not samples.any()
        self._silent_run = self._silent_run + 1 if silent else 0
        if silent and self._silence is not None and self._silent_run > self.SETTLE:
            return self._silence
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = pts
        (packet,) = self._codec.encode(frame)
        self.encoded += 1
        payload = bytes(packet)
        if self._silent_run == self.SETTLE:
            self._silence = payload
        return payload
