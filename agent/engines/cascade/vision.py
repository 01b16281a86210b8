"""Counting faces in the aligned video frames, offline, with OpenCV's bundled Haar cascade."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from media.endpoint import CAMERA_OFF_TICKS
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


class FaceWatch:
    """What every session's camera shows, counted ahead: the reply reads a count that is ready.

    Counting the faces in a frame costs ~40-100 ms; done when the user asked,
    it added that to every camera question (three frames: ~0.3 s). Here one
    thread, run only on the cores' idle time, counts a session's newest frame
    when the user starts to speak (`Watched.look`: a question about the camera
    is about what it shows then, and is over a second away from its answer)
    and otherwise every `every_s`, to keep the count of a silent camera
    current; a busy server counts later, never delays speech. Counting every
    session's camera once a second cost more than the rest of a camera
    session (a core held 3 camera sessions against 5 without).
    """

    def __init__(self, counter: FaceCounter, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
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
        """A session with a frame not counted yet that asked for a count, else the one whose count is oldest if
        that is `every_s` old."""
        now = self.clock()
        due = [w for w in self._watched if w._frame is not None and (w._wanted or now - w._counted_at >= self.every_s)]
        return min(due, key=lambda w: (not w._wanted, w._counted_at), default=None)

    def _run(self) -> None:
        lower_thread(threading.get_native_id())
        while True:
            with self._cond:
                while not self._stop and (w := self._due()) is None:
                    self._cond.wait(min(1.0, self.every_s) if self._watched else None)  # a count falls due
                if self._stop:
                    return
                assert w is not None
                tick, image = w._frame  # type: ignore[misc]
                w._frame, w._wanted = None, False
                w._counted_at = self.clock()
            n = self.counter.count(image)
            with self._cond:
                w._count = (tick, n)
                self.counted += 1


class Watched:
    """One session's camera in a FaceWatch: frames in as they come, counts out."""

    def __init__(self, watch: FaceWatch) -> None:
        self._watch = watch
        self._frame: tuple[int, np.ndarray] | None = None  # the newest, not counted yet
        self._newest: tuple[int, np.ndarray] | None = None
        self._count: tuple[int, int] | None = None  # the last count: its frame's tick, and the faces in it
        self._counted_at = -float("inf")
        self._wanted = False

    def offer(self, tick: int, image: np.ndarray) -> None:
        """Every camera frame: kept as the newest; the watcher is woken only when it has a count to make."""
        with self._watch._cond:
            self._frame = self._newest = (tick, image)
            if self._wanted or self._count is None:  # asked for, or the camera's first
                self._watch._cond.notify()

    def look(self) -> None:
        """Count the newest frame soon (the user started to speak)."""
        with self._watch._cond:
            self._wanted = True
            self._watch._cond.notify()

    def faces(self, now_tick: int, fresh_ticks: int = CAMERA_OFF_TICKS, count_ticks: int = 125) -> int | None:
        """Faces in view: None when no frame came in the last `fresh_ticks` (3.2 s: the camera is off), else the
        last count if its frame is of the last `count_ticks` (10 s), else counted here, on the newest frame."""
        with self._watch._cond:
            count, newest = self._count, self._newest
        if newest is None or now_tick - newest[0] > fresh_ticks:
            return None
        if count is not None and now_tick - count[0] <= count_ticks:
            return count[1]
        return self._watch.counter.count(newest[1])

    def close(self) -> None:
        with self._watch._cond:
            if self in self._watch._watched:
                self._watch._watched.remove(self)
