"""Counting faces in the aligned video frames, offline, with OpenCV's bundled Haar cascade."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np


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
