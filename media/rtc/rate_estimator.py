"""aiortc's video bandwidth estimator made cheap: its incoming rate in O(1), its frame-period minimum in C,
its estimates sent at libwebrtc's pace. The same figures as aiortc's."""

from __future__ import annotations

import collections
from typing import Any

from aiortc.rate import MIN_FRAME_PERIOD_HISTORY_LENGTH


class WindowRate:
    """aiortc's `RateCounter` (the bytes received in the last `window` ms, as a rate) in O(1) a packet.

    aiortc's keeps a list of 1 ms buckets: each packet walks the buckets of
    every millisecond since the last one to clear them, and each reset builds
    1,000 bucket objects; its video bandwidth estimator (REMB) calls it for
    every video packet, ~10 % of the event loop at a dozen webcam sessions.
    Here the window is a queue of (ms, bytes); the figures are the same.
    """

    def __init__(self, window_size: int, scale: int = 8000) -> None:
        self._window = window_size
        self._scale = scale
        self.reset()

    def reset(self) -> None:
        self._added: collections.deque[tuple[int, int]] = collections.deque()
        self._origin_ms: int | None = None
        self._count = 0
        self._total = 0

    def add(self, value: int, now_ms: int) -> None:
        if self._origin_ms is None:
            self._origin_ms = now_ms
        else:
            self._erase_old(now_ms)
        self._added.append((now_ms, value))
        self._count += 1
        self._total += value

    def rate(self, now_ms: int) -> int | None:
        if self._origin_ms is not None:
            self._erase_old(now_ms)
            active = now_ms - self._origin_ms + 1
            if self._count > 0 and active > 1:
                return round(self._scale * self._total / active)
        return None

    def _erase_old(self, now_ms: int) -> None:
        assert self._origin_ms is not None
        origin = now_ms - self._window + 1
        if self._origin_ms < origin:
            while self._added and self._added[0][0] < origin:
                _, value = self._added.popleft()
                self._count -= 1
                self._total -= value
            self._origin_ms = origin


class MinFramePeriod:
    """aiortc's `OveruseEstimator.update_min_frame_period` (the least of the last 60 group time deltas), the
    minimum taken in C: aiortc's walks its history list in Python for every packet group, ~3 % of the loop
    at 30 webcam sessions on one core. Same figures."""

    def __init__(self, history: int = MIN_FRAME_PERIOD_HISTORY_LENGTH) -> None:
        self._history: collections.deque[float] = collections.deque(maxlen=history - 1)

    def __call__(self, ts_delta: float) -> float:
        least = min(self._history, default=ts_delta)
        self._history.append(ts_delta)
        return min(least, ts_delta)


class ThrottledRemb:
    """aiortc's video bandwidth estimator, whose estimates go out as REMB at most every 200 ms unless one
    falls by more than 3 % (libwebrtc's REMB throttler does the same).

    While aiortc's estimator judges the link overused it returns an estimate
    for every packet, and its receiver sends each as an RTCP packet: one per
    video packet (~4 % of the event loop's samples at 14 webcam sessions on
    one core, just when the server is busiest), RTCP the browser does not
    need.
    """

    INTERVAL_MS = 200
    FALL_PERCENT = 3

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator
        self._last_ms: int | None = None
        self._last_bitrate = 0
        self.held = 0  # estimates not sent

    def add(self, arrival_time_ms: int, abs_send_time: int, payload_size: int, ssrc: int) -> Any:
        remb = self.estimator.add(
            arrival_time_ms=arrival_time_ms, abs_send_time=abs_send_time, payload_size=payload_size, ssrc=ssrc
        )
        if remb is None:
            return None
        bitrate = remb[0]
        fell = bitrate * (100 + self.FALL_PERCENT) < self._last_bitrate * 100
        if self._last_ms is not None and arrival_time_ms - self._last_ms < self.INTERVAL_MS and not fell:
            self.held += 1
            return None
        self._last_ms, self._last_bitrate = arrival_time_ms, bitrate
        return remb
