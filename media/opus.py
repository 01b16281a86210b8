"""Opus both ways: encoding the outbound speech on the event loop; decoding the inbound audio with loss
concealment and in-band FEC.

aiortc's path for an `av.AudioFrame` cost ~0.45 ms of CPU per 20 ms frame
(EPYC): it resamples our 24 kHz mono to 48 kHz stereo, encodes 96 kbit/s
stereo in a thread-pool executor (a thread hand-off each way) and measures the
audio level in pure Python. Opus codes 24 kHz mono directly (a receiver
decodes a mono packet at whatever layout it negotiated), at a rate made for
speech; its packets leave as RTP below aiortc's sender (media/rtc/speech_out.py).
~0.1 ms.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
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


@functools.cache
def _libopus() -> ctypes.CDLL:
    """The libopus inside PyAV's wheel (the one its decoder uses), so nothing more needs installing; a system
    libopus where PyAV was built against one."""
    bundled = sorted(glob.glob(os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs", "libopus*.so*")))
    path = bundled[0] if bundled else ctypes.util.find_library("opus")
    if path is None:
        raise RuntimeError("no libopus found: neither in PyAV's wheel nor on the system")
    lib = ctypes.CDLL(path)
    lib.opus_decoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
    lib.opus_decode_float.restype = ctypes.c_int
    lib.opus_decode_float.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.opus_packet_has_lbrr.restype = ctypes.c_int
    lib.opus_packet_has_lbrr.argtypes = [ctypes.c_char_p, ctypes.c_int32]
    return lib


class OpusError(ValueError):
    """A packet libopus could not decode."""


class OpusDecoder:
    """Inbound Opus to float32 PCM, with what a lost packet needs: concealment and in-band FEC.

    PyAV's decoder (FFmpeg's libopus wrapper) offers neither: FFmpeg takes an
    empty packet for the end of the stream, and it always decodes with
    `decode_fec` 0. libopus itself does both (a NULL packet conceals; the
    next packet's LBRR data, decoded with `decode_fec` 1, rebuilds the lost
    one), so this calls it through ctypes. No maintained binding loads the
    libopus PyAV ships (opuslib-next needs a system libopus that a fresh
    install does not have). ~0.03 ms a 20 ms packet.
    """

    def __init__(self, rate: int = 48_000, channels: int = 1) -> None:
        self._lib = _libopus()
        self.rate, self.channels = rate, channels
        err = ctypes.c_int(0)
        self._state = self._lib.opus_decoder_create(rate, channels, ctypes.byref(err))
        if err.value != 0 or not self._state:
            raise RuntimeError(f"opus_decoder_create failed ({err.value})")
        self._pcm = np.zeros(rate * 120 // 1000 * channels, np.float32)  # the longest Opus packet: 120 ms

    def close(self) -> None:
        if self._state:
            self._lib.opus_decoder_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()

    def _run(self, data: bytes | None, samples: int, fec: int) -> np.ndarray:
        n = self._lib.opus_decode_float(
            self._state, data, len(data) if data else 0, self._pcm.ctypes.data, samples, fec
        )
        if n < 0:
            raise OpusError(f"libopus could not decode a packet (error {n})")
        return self._pcm[: n * self.channels].copy()

    def decode(self, payload: bytes) -> np.ndarray:
        """One packet's audio, interleaved."""
        if not payload:
            raise OpusError("an empty Opus packet")
        return self._run(payload, self._pcm.size // self.channels, 0)

    def conceal(self, samples: int) -> np.ndarray:
        """`samples` (a multiple of 2.5 ms) made up for a lost packet from what came before it."""
        return self._run(None, samples, 0)

    def recover(self, following: bytes, samples: int) -> np.ndarray:
        """The lost packet before `following`, from the FEC copy it carries (concealed where it has none)."""
        return self._run(following, samples, 1)

    @staticmethod
    def carries_fec(payload: bytes) -> bool:
        """Whether a packet holds an FEC copy of the one before it (LBRR)."""
        return bool(payload) and _libopus().opus_packet_has_lbrr(payload, len(payload)) > 0
