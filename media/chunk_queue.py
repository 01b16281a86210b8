"""The bounded queue between the aligner and the session.

Audio and video travel in separate rings so that under load video is shed
first: while the audio ring reports pressure, new video is not queued at all
(counted), and the video ring itself keeps only the freshest few frames.
Audio is dropped only when its ring is completely full.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from media.aligner import AlignedChunk, VideoSample
from media.ring import DropPolicy, RingBuffer


@dataclass(frozen=True, slots=True)
class _TickVideo:
    tick: int
    video: VideoSample


class ChunkQueue:
    def __init__(self, capacity: int = 50, high: int = 12, low: int = 3, video_capacity: int = 2) -> None:
        self.audio: RingBuffer[AlignedChunk] = RingBuffer(
            capacity, DropPolicy.DROP_OLDEST, high=high, low=low, name="audio"
        )
        self.video: RingBuffer[_TickVideo] = RingBuffer(video_capacity, DropPolicy.DROP_OLDEST, name="video")
        self.video_shed = 0  # video left out because audio was under pressure
        self.shed_video = False  # set by an overload policy to drop all video

    @property
    def pressure(self) -> bool:
        return self.audio.pressure

    def __len__(self) -> int:
        return len(self.audio)

    def push(self, chunk: AlignedChunk) -> None:
        if chunk.video is not None:
            if self.audio.pressure or self.shed_video:
                self.video_shed += 1
            else:
                self.video.push(_TickVideo(chunk.tick, chunk.video))
            chunk = replace(chunk, video=None)
        self.audio.push(chunk)

    def pop(self) -> AlignedChunk | None:
        chunk = self.audio.pop()
        if chunk is None:
            return None
        head = self.video.peek()
        while head is not None and head.tick < chunk.tick:  # its audio was dropped
            self.video.pop()
            self.video.stats.dropped += 1
            head = self.video.peek()
        if head is not None and head.tick == chunk.tick:
            self.video.pop()
            return replace(chunk, video=head.video)
        return chunk
