"""The track adapters: every remote track read until it ends."""

from __future__ import annotations

from collections.abc import Callable

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError


async def drain(track: MediaStreamTrack, on_frame: Callable[[av.frame.Frame], None]) -> None:
    """Read a remote track until it ends. Always drain every track: an unread
    aiortc track buffers without bound (about 13 MB/s for 640x480 video)."""
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        on_frame(frame)
