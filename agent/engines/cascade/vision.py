"""Counting faces in the aligned video frames, offline, with OpenCV's bundled Haar cascade."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from media.priority import lower_thread


class FaceCounter:
    """Thread-safe: OpenCV's CascadeClassifier is not, so each thread gets its own."""

    def __init__(self, max_side: int = 640) -> None:
        import cv2

        self._cv2 = cv2
        self._path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        self._local = threading.local()
        self.max_side = max_side
        if self._classifier().empty():
            raise RuntimeError(f"OpenCV's face cascade did not load from {self._path}")

    def _classifier(self):  # noqa: ANN202 - cv2 type
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = self._cv2.CascadeClassifier(self._path)
        return c

    def count(self, image: np.ndarray) -> int:
        cv2 = self._cv2
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        h, w = gray.shape
        scale = min(1.0, self.max_side / max(h, w))
        if scale < 1.0:
            gray = cv2.resize(gray, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
        gray = cv2.equalizeHist(gray)
        side = max(24, min(gray.shape) // 12)
        faces = self._classifier().detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5, minSize=(side, side))
        return len(faces)

    def count_in(self, frames: Sequence[np.ndarray]) -> int:
        """Faces in a short run of frames: the median count, robust to one bad frame."""
        if not frames:
            return 0
        counts = sorted(self.count(f) for f in frames)
        return counts[len(counts) // 2]


class FaceWatch:
    """What every session's camera shows, counted ahead: the reply reads a count that is ready.

    Counting the faces in a frame costs ~40-100 ms; done when the user asks,
    it added that to every camera question (three frames: ~0.3 s). Here one
    thread, run only on the cores' idle time, counts each session's newest
    frame about once every `every_s`, the session whose count is oldest
    first; a busy server counts less often, never later speech. A reply
    takes the median of the last few counts, or counts the newest frame itself
    when none is recent (the camera just came on, or the server is too busy).
    """

    def __init__(self, counter: FaceCounter, every_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.counter, self.every_s, self.clock = counter, every_s, clock
        self._cond = threading.Condition()
        self._watched: list[Watched] = []
        self._thread: threading.Thread | None = None
        self._stop = False
        self.counted = 0

    def watch(self) -> Watched:
        """A session's camera, watched until its `close()`."""
        w = Watched(self)
        with self._cond:
            self._watched.append(w)
            self._cond.notify()
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._run, name="faces", daemon=True)
                self._thread.start()
        return w

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def _due(self) -> Watched | None:
        """The session whose newest frame has gone uncounted longest, if its count is `every_s` old."""
        now = self.clock()
        due = [w for w in self._watched if w._frame is not None and now - w._counted_at >= self.every_s]
        return min(due, key=lambda w: w._counted_at, default=None)

    def _run(self) -> None:
        lower_thread(threading.get_native_id())
        while True:
            with self._cond:
                while not self._stop and (w := self._due()) is None:
                    self._cond.wait(self.every_s / 4 if self._watched else None)
                if self._stop:
                    return
                assert w is not None
                tick, image = w._frame  # type: ignore[misc]
                w._frame = None
                w._counted_at = self.clock()
            n = self.counter.count(image)
            with self._cond:
                w._counts.append((tick, n))
                self.counted += 1


class Watched:
    """One session's camera in a FaceWatch: frames in as they come, counts out."""

    def __init__(self, watch: FaceWatch, keep: int = 3) -> None:
        self._watch = watch
        self._frame: tuple[int, np.ndarray] | None = None  # the newest, not counted yet
        self._newest: tuple[int, np.ndarray] | None = None
        self._counts: collections.deque[tuple[int, int]] = collections.deque(maxlen=keep)
        self._counted_at = -float("inf")

    def offer(self, tick: int, image: np.ndarray) -> None:
        with self._watch._cond:
            self._frame = self._newest = (tick, image)
            self._watch._cond.notify()

    def faces(self, now_tick: int, fresh_ticks: int = 40) -> int | None:
        """Faces in view lately: the median of the counts of the last `fresh_ticks` (3.2 s); counted here, on the
        newest frame, if none is that recent; None when no frame is (the camera is off)."""
        with self._watch._cond:
            counts = sorted(n for tick, n in self._counts if now_tick - tick <= fresh_ticks)
            newest = self._newest
        if counts:
            return counts[len(counts) // 2]
        if newest is None or now_tick - newest[0] > fresh_ticks:
            return None
        return self._watch.counter.count(newest[1])

    def close(self) -> None:
        with self._watch._cond:
            if self in self._watch._watched:
                self._watch._watched.remove(self)
