"""The aligner-to-engine queue: video shed before audio, audio dropped only when full, pictures kept with their
tick."""

import numpy as np

from media.aligner import AlignedChunk, VideoSample
from media.chunk_queue import ChunkQueue


def chunk(tick: int, picture: bool = False) -> AlignedChunk:
    video = VideoSample(np.full((2, 2, 3), tick, np.uint8), tick * 0.08, tick * 0.08, "exact") if picture else None
    return AlignedChunk(tick, np.zeros(1280, np.float32), video)


def test_each_picture_comes_back_with_its_own_ticks_audio():
    q = ChunkQueue()
    for t in range(4):
        q.push(chunk(t, picture=t % 2 == 1))
    out = [q.pop() for _ in range(4)]
    assert [c.tick for c in out] == [0, 1, 2, 3]
    assert [c.video is not None for c in out] == [False, True, False, True]
    assert int(out[3].video.image[0, 0, 0]) == 3
    assert q.pop() is None


def test_under_audio_pressure_new_video_is_shed_and_counted():
    q = ChunkQueue(capacity=10, high=4, low=1)
    for t in range(4):
        q.push(chunk(t))
    assert q.pressure
    q.push(chunk(4, picture=True))
    assert q.video_shed == 1 and len(q.video) == 0
    assert len(q) == 5  # its audio is kept
    while q.pop() is not None:  # drained below the low watermark: pressure clears, video is queued again
        pass
    assert not q.pressure
    q.push(chunk(5, picture=True))
    assert q.pop().video is not None and q.video_shed == 1


def test_the_overload_switch_sheds_every_picture():
    q = ChunkQueue()
    q.shed_video = True
    q.push(chunk(0, picture=True))
    assert q.video_shed == 1 and q.pop().video is None


def test_only_the_freshest_pictures_wait_and_one_whose_audio_was_dropped_goes_too():
    q = ChunkQueue(capacity=3, high=3, low=1, video_capacity=2)
    for t in range(3):
        q.push(chunk(t, picture=True))
    assert q.video.stats.dropped == 1  # two pictures wait, the oldest went
    q.push(chunk(3))  # the audio ring is full: its oldest (tick 0) goes
    assert q.audio.stats.dropped == 1
    first = q.pop()
    assert first.tick == 1 and first.video is not None
    assert [c.tick for c in iter(q.pop, None)] == [2, 3]
