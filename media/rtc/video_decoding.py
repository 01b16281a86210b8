"""Inbound video decoded in a process of its own on idle CPU (`media.video_worker`), each camera's frames shed
whole up to a key frame when it falls behind.

Why a process: see `media.video_worker`. What it costs the server: an encoded
frame (a few KB) written to a pipe, and back only the pictures the session's
aligner can use (twice its video rate), not the camera's every frame.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import queue
import subprocess
import sys
import threading
import time
from fractions import Fraction

import av
import numpy as np
from aiortc import RTCRtpReceiver
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from media.rtc.private import deliver
from media.video_worker import CLOSE, CODECS, FAILED, FRAME, FROM_WORKER, OPEN, PICTURE, TO_WORKER, read_message

log = logging.getLogger(__name__)

VIDEO_TIME_BASE = Fraction(1, 90_000)
RESTART_AFTER_S = 1.0  # a worker that keeps dying is restarted no more often than this


def is_vp8_key_frame(data: bytes) -> bool:
    """RFC 6386 9.1: the frame tag's lowest bit is 0 on a key frame."""
    return bool(data) and not data[0] & 1


class DecodingProcess:
    """The worker process every camera of this server process shares, started on demand and again if it dies.

    A writer thread feeds its stdin (a pipe may be full: never on the event
    loop) and a reader thread takes its replies to each stream's decoder. Both
    block in the kernel nearly all the time, at normal priority, and hold the
    GIL only to copy a message.
    """

    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = argv or [sys.executable, "-m", "media.video_worker"]
        self.restarts = 0
        self._lock = threading.Lock()
        self._streams: dict[int, IdleVideoDecoder] = {}
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._outbox: queue.SimpleQueue[bytes | None] | None = None
        self._died_at = -RESTART_AFTER_S

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> bool:
        """Start the worker unless it runs; False if it died less than `RESTART_AFTER_S` ago."""
        with self._lock:
            return self._start_locked()

    def _start_locked(self) -> bool:
        if self._proc is not None:
            return True
        if time.monotonic() - self._died_at < RESTART_AFTER_S:
            return False
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        except OSError as exc:
            log.error("the video decoding process did not start: %s", exc)
            self._died_at = time.monotonic()
            return False
        outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._proc, self._outbox = proc, outbox
        for sid, stream in self._streams.items():  # after a restart: each stream again, from its next key frame
            outbox.put(TO_WORKER.pack(OPEN, 0, sid, stream.every_ticks, 0))
        threading.Thread(target=self._write, args=(proc, outbox), name="video-decoding-in", daemon=True).start()
        threading.Thread(target=self._read, args=(proc,), name="video-decoding-out", daemon=True).start()
        return True

    def open(self, stream: IdleVideoDecoder) -> int:
        with self._lock:
            sid = next(self._ids)
            self._streams[sid] = stream
            if self._start_locked():
                assert self._outbox is not None
                self._outbox.put(TO_WORKER.pack(OPEN, 0, sid, stream.every_ticks, 0))
            return sid

    def send(self, sid: int, codec: int, pts: int, data: bytes) -> bool:
        """Queue one encoded frame; False if no worker runs to take it."""
        with self._lock:
            if not self._start_locked():
                return False
            assert self._outbox is not None
            self._outbox.put(TO_WORKER.pack(FRAME, codec, sid, pts, len(data)) + data)
            return True

    def close(self, sid: int) -> None:
        with self._lock:
            self._streams.pop(sid, None)
            if self._outbox is not None:
                self._outbox.put(TO_WORKER.pack(CLOSE, 0, sid, 0, 0))

    def shutdown(self) -> None:
        """End the worker (its stdin closes; it exits) and wait for it."""
        with self._lock:
            proc, outbox = self._proc, self._outbox
            self._proc = self._outbox = None
        if proc is None or outbox is None:
            return
        outbox.put(None)
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _write(self, proc: subprocess.Popen[bytes], outbox: queue.SimpleQueue[bytes | None]) -> None:
        assert proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):  # the worker died: the reader sees it too
            while (message := outbox.get()) is not None:
                proc.stdin.write(message)
        with contextlib.suppress(OSError):
            proc.stdin.close()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        try:
            while (message := read_message(proc.stdout, FROM_WORKER)) is not None:
                (kind, sid, pts, width, height, _), data = message
                stream = self._streams.get(sid)
                if stream is not None:
                    stream.replied(kind, pts, width, height, data)
        except (OSError, ValueError) as exc:
            log.error("the video decoding process's reply did not read: %s", exc)
        self._ended(proc)

    def _ended(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if self._proc is not proc:  # shut down on purpose
                return
            self._proc, outbox, self._outbox = None, self._outbox, None
            self._died_at = time.monotonic()
            self.restarts += 1
            streams = list(self._streams.values())
        if outbox is not None:
            outbox.put(None)  # the writer ends
        with contextlib.suppress(OSError):
            proc.kill()
        code = proc.wait()
        log.error("the video decoding process ended (exit %s); it restarts with the next frame", code)
        for stream in streams:
            stream.worker_lost()


_shared: DecodingProcess | None = None
_shared_lock = threading.Lock()


def shared_process() -> DecodingProcess:
    """This server process's worker, ended when the interpreter exits."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = DecodingProcess()
            atexit.register(_shared.shutdown)
        return _shared


class IdleVideoDecoder:
    """What a video receiver's decoder queue becomes: its frames go to the worker process, its pictures come
    back to the track on the event loop; aiortc's decoder thread only waits for the end.

    At most `max_frames` wait in the worker. Past that, new frames are shed
    and counted, a key frame is asked for (aiortc sends a PLI when its
    decoder-error event is set), and VP8 inter frames are dropped until it
    comes, since they cannot be decoded without the frames before them.
    """

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        decode_error: threading.Event | None = None,
        every_s: float = 0.0,
        max_frames: int = 10,
        process: DecodingProcess | None = None,
    ) -> None:
        self._receiver = receiver
        self.decode_error = decode_error or threading.Event()
        self.every_ticks = round(every_s * 90_000)
        self.max_frames = max_frames
        self.decoded = 0  # decoded in the worker
        self.passed = 0  # of those, handed on (the rest came too soon after the one before)
        self.shed = 0  # dropped undecoded
        self.errors = 0  # did not decode
        self._process = process or shared_process()
        self._sid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._awaiting_key = False
        self._stopped = threading.Event()

    def put(self, task: tuple[RTCRtpCodecParameters, JitterFrame] | None) -> None:
        """From aiortc's receiver, on the event loop."""
        if task is None:
            self._stopped.set()
            if self._sid is not None:
                self._process.close(self._sid)
            return
        codec, frame = task
        if self._sid is None:
            self._loop = asyncio.get_running_loop()
            self._sid = self._process.open(self)
        name = codec.name.upper()
        vp8 = name == "VP8"
        with self._lock:
            if self._awaiting_key and vp8 and not is_vp8_key_frame(frame.data):
                self.shed += 1
                return
            if self._in_flight >= self.max_frames or name not in CODECS:
                self._shed_locked(vp8)
                return
            self._awaiting_key = False
            self._in_flight += 1
        if not self._process.send(self._sid, CODECS.index(name), frame.timestamp, frame.data):
            with self._lock:
                self._in_flight -= 1
                self._shed_locked(vp8)

    def _shed_locked(self, vp8: bool) -> None:
        self.shed += 1
        self._awaiting_key = vp8
        self.decode_error.set()

    def get(self, block: bool = True, timeout: float | None = None) -> None:
        """aiortc's decoder thread: wait for the end, then end the track."""
        self._stopped.wait()

    def replied(self, kind: int, pts: int, width: int, height: int, data: bytes) -> None:
        """From the reader thread: the worker is done with one frame."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if kind == FAILED:
                self.errors += 1
            else:
                self.decoded += 1
        if kind == FAILED:
            self.decode_error.set()  # as aiortc does when a frame fails: ask for a key frame
        elif kind == PICTURE and not self._stopped.is_set() and self._loop is not None:
            planes = np.frombuffer(data, np.uint8).reshape(height * 3 // 2, width)
            picture = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            picture.pts, picture.time_base = pts, VIDEO_TIME_BASE
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._deliver, picture)

    def _deliver(self, picture: av.VideoFrame) -> None:
        if self._stopped.is_set():
            return
        self.passed += 1
        deliver(self._receiver.track, picture)

    def worker_lost(self) -> None:
        """The worker died with this stream's frames and its decoder state: shed them, start at a key frame."""
        with self._lock:
            self.shed += self._in_flight
            self._in_flight = 0
            self._awaiting_key = True
        self.decode_error.set()
