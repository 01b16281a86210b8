"""A linear echo canceller alone: speex's MDF adaptive filter (Debian's libspeexdsp1, Xiph.org, BSD), no residual
echo suppressor.

AEC3 (`echo_cancel.py`) follows its linear filter with a suppressor that takes a voice starting in the echo's
tail for echo: a short utterance right after the reply is held loses its first few hundred milliseconds, and
the recogniser hears whatever fits what is left ("Got it." as "Partly firm."). The linear filter alone cancels
less echo (9 dB against AEC3's 24 in `benchmarks/linear_echo.py`'s room) but leaves the voice whole: from
its output held speech was heard with under half the word errors (0.39 against AEC3's 0.84-0.98). The echo
canceller runs it beside AEC3 (`echo_cancel.py`, `heard`): speech over a held reply is recognised from it.

speex is reached through ctypes: the Python bindings on PyPI are unkept (speexdsp, 2018) or carry no licence
(pyaec), and the library itself is a Debian package (`scripts/setup.sh --test` installs it).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

SET_SAMPLING_RATE = 24  # SPEEX_ECHO_SET_SAMPLING_RATE
_I16 = ctypes.POINTER(ctypes.c_int16)


class SpeexUnavailable(RuntimeError):
    """libspeexdsp is not installed."""


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("speexdsp") or "libspeexdsp.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        raise SpeexUnavailable(f"libspeexdsp is missing ({exc}): apt-get install libspeexdsp1") from exc
    lib.speex_echo_state_init.restype = ctypes.c_void_p
    lib.speex_echo_state_init.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.speex_echo_cancellation.argtypes = [ctypes.c_void_p, _I16, _I16, _I16]
    lib.speex_echo_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.speex_echo_state_destroy.argtypes = [ctypes.c_void_p]
    return lib


class LinearEcho:
    """The microphone less speex's linear estimate of the echo of `far`, frame by frame (int16 or float in
    [-1, 1]; both 16 kHz, `frame` samples each, `far` being what played as that microphone frame was taken)."""

    def __init__(self, frame: int = 160, taps: int = 8192, rate: int = 16_000) -> None:
        self._lib = _library()
        self.frame = frame
        self._state = self._lib.speex_echo_state_init(frame, taps)
        if not self._state:
            raise SpeexUnavailable("speex_echo_state_init failed")
        self._lib.speex_echo_ctl(self._state, SET_SAMPLING_RATE, ctypes.byref(ctypes.c_int(rate)))
        self._out = np.zeros(frame, np.int16)

    def process(self, mic: np.ndarray, far: np.ndarray) -> np.ndarray:
        if mic.shape != (self.frame,) or far.shape != (self.frame,):
            raise ValueError(f"frames of {self.frame} samples expected, got {mic.shape} and {far.shape}")
        rec, play = _int16(mic), _int16(far)
        self._lib.speex_echo_cancellation(
            self._state, rec.ctypes.data_as(_I16), play.ctypes.data_as(_I16), self._out.ctypes.data_as(_I16)
        )
        out = self._out.copy()
        return out if mic.dtype == np.int16 else out.astype(np.float32) / 32767

    def close(self) -> None:
        if self._state:
            self._lib.speex_echo_state_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()


def _int16(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.int16:
        return np.ascontiguousarray(x)
    return (np.clip(x, -1, 1) * 32767).astype(np.int16)
