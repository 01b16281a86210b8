"""Faces counted ahead of the question: FaceWatch on a real photo, on its own thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import skimage.data

from agent.engines.cascade.vision import FaceCounter, FaceWatch


class Spy(FaceCounter):
    """A FaceCounter that notes which thread counted, and how often."""

    def __init__(self):
        super().__init__()
        self.threads: list[str] = []

    def count(self, image):
        self.threads.append(threading.current_thread().name)
        return super().count(image)


def wait(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not pred():
        time.sleep(0.02)
    return pred()


def test_the_newest_frame_is_counted_when_the_user_starts_to_speak_and_the_answer_is_ready():
    spy = Spy()
    watch = FaceWatch(spy, every_s=3600.0)  # no refresh of its own in this test: only what is asked for
    face, wall = skimage.data.astronaut(), np.full((480, 640, 3), 128, np.uint8)
    seeing, blank = watch.watch(), watch.watch()
    try:
        seeing.offer(0, wall)
        blank.offer(0, wall)
        assert wait(lambda: watch.counted == 2)  # each camera counted once as it came on
        for tick in range(1, 10):  # frames keep coming (2 a second): none is counted unasked
            seeing.offer(tick, face)
            blank.offer(tick, wall)
        time.sleep(0.3)
        assert watch.counted == 2
        seeing.look()  # the user starts to speak
        blank.look()
        assert wait(lambda: watch.counted == 4)
        before = len(spy.threads)
        assert seeing.faces(12) == 1 and blank.faces(12) == 0  # the question, a second later: answers ready
        assert len(spy.threads) == before, "the answer was counted when asked, not ready"
        assert set(spy.threads) == {"faces"}
    finally:
        seeing.close()
        blank.close()
        watch.close()


def test_a_silent_camera_is_counted_now_and_then():
    watch = FaceWatch(Spy(), every_s=0.2)
    seeing = watch.watch()
    try:
        for tick in range(8):
            seeing.offer(tick, skimage.data.astronaut())
            time.sleep(0.1)
        assert wait(lambda: watch.counted >= 3)
        assert watch.counted <= 6  # about every 0.2 s, not every frame
    finally:
        seeing.close()
        watch.close()


def test_no_recent_count_is_counted_on_the_spot_and_an_old_frame_means_the_camera_is_off():
    spy = Spy()
    watch = FaceWatch(spy, every_s=3600.0)  # the watcher counts each session once, then waits an hour
    seeing = watch.watch()
    try:
        assert seeing.faces(0) is None  # no frame ever: the camera is off
        seeing.offer(0, skimage.data.astronaut())
        assert wait(lambda: watch.counted == 1)
        seeing.offer(200, skimage.data.astronaut())  # 16 s later: the count of tick 0 is stale
        assert seeing.faces(200) == 1
        assert spy.threads[-1] == threading.current_thread().name  # counted when asked
        assert seeing.faces(300) is None  # nothing for 8 s: off
    finally:
        seeing.close()
        watch.close()
    assert not any(t.name == "faces" and t.is_alive() for t in threading.enumerate())
