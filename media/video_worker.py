"""The camera decoders' own process (`python -m media.video_worker`): it runs only on idle CPU, and shares no GIL
with the server.

The decoders used to be threads at SCHED_IDLE in the server's process. A
thread that runs Python needs the GIL; with the server's 1 ms switch interval
one that waits for it asks the holder to hand it over, and the holder (the
event loop, pacing every session's audio) then waits until the idle thread has
taken it: on a core busy with recognition and speech that was 100-270 ms, every
session's speech stopped at once. Here the idle-time work has no lock in
common with the loop: a pipe in, a pipe out.

Messages in (stdin): `TO_WORKER` (kind, codec, stream, RTP timestamp, payload
length) and the payload: OPEN (the timestamp field holds the least interval
between passed-on pictures, 90 kHz), FRAME (one encoded frame), CLOSE. Messages
out (stdout): `FROM_WORKER` (kind, stream, timestamp, width, height, payload
length) for each frame in: PICTURE (decoded and passed on: yuv420p planes, Y
then U then V), DONE (decoded, not passed on: another came too recently) or
FAILED (did not decode). Every frame is decoded, since each VP8 inter frame
needs the ones before it; only the pictures the session can use cross back.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from typing import BinaryIO

import av

TO_WORKER = struct.Struct("<BBIII")
FROM_WORKER = struct.Struct("<BIIHHI")
OPEN, FRAME, CLOSE = 1, 2, 3
PICTURE, DONE, FAILED = 1, 2, 3
CODECS = ("VP8", "H264")  # aiortc's video codecs, by the index a FRAME carries
_DECODERS = ("libvpx", "h264")  # aiortc's choices for each
MAX_PAYLOAD = 64 << 20  # a 4K yuv420p picture is 12 MB; more is a broken stream


def read_exactly(pipe: BinaryIO, n: int) -> bytes | None:
    """`n` bytes, or None if the pipe ends first (an unbuffered pipe gives what has arrived)."""
    parts, left = [], n
    while left:
        part = pipe.read(left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_message(pipe: BinaryIO, header: struct.Struct) -> tuple[tuple[int, ...], bytes] | None:
    """One message, or None at the end of the pipe."""
    head = read_exactly(pipe, header.size)
    if head is None:
        return None
    fields = header.unpack(head)
    length = fields[-1]
    if length > MAX_PAYLOAD:
        raise ValueError(f"a message of {length} bytes")
    data = read_exactly(pipe, length)
    return None if data is None else (fields, data)


class _Stream:
    def __init__(self, every: int) -> None:
        self.every = every
        self.last: int | None = None  # the timestamp of the last picture passed on
        self.codec = -1
        self.decoder: av.CodecContext | None = None


def _due(stream: _Stream, pts: int) -> bool:
    if stream.last is None:
        return True
    ahead = (pts - stream.last + (1 << 31)) % (1 << 32) - (1 << 31)  # RTP timestamps wrap
    return ahead >= stream.every or ahead < -5 * 90_000  # far behind: the sender restarted its clock


def _picture(frame: av.VideoFrame) -> tuple[int, int, bytes]:
    w, h = frame.width & ~1, frame.height & ~1  # yuv420p as an array needs even sides
    if (w, h) != (frame.width, frame.height) or frame.format.name != "yuv420p":
        frame = frame.reformat(width=w, height=h, format="yuv420p")
    return w, h, frame.to_ndarray().tobytes()


def serve(inbox: BinaryIO, outbox: BinaryIO) -> None:
    streams: dict[int, _Stream] = {}
    while (message := read_message(inbox, TO_WORKER)) is not None:
        (kind, codec, sid, pts, _), data = message
        if kind == OPEN:
            streams[sid] = _Stream(pts)
            continue
        if kind == CLOSE:
            streams.pop(sid, None)
            continue
        stream = streams.setdefault(sid, _Stream(0))
        if codec >= len(_DECODERS):
            outbox.write(FROM_WORKER.pack(FAILED, sid, pts, 0, 0, 0))
            outbox.flush()
            continue
        if codec != stream.codec:
            stream.codec, stream.decoder = codec, av.CodecContext.create(_DECODERS[codec], "r")
        try:
            packet = av.Packet(data)
            packet.pts = pts
            frames = stream.decoder.decode(packet)  # type: ignore[union-attr]  # set just above
        except av.FFmpegError:
            outbox.write(FROM_WORKER.pack(FAILED, sid, pts, 0, 0, 0))
            outbox.flush()
            continue
        if frames and _due(stream, pts):  # one reply a frame: the newest picture it gave, if one is due
            w, h, planes = _picture(frames[-1])
            outbox.write(FROM_WORKER.pack(PICTURE, sid, pts, w, h, len(planes)))
            outbox.write(planes)
            stream.last = pts
        else:
            outbox.write(FROM_WORKER.pack(DONE, sid, pts, 0, 0, 0))
        outbox.flush()


def main() -> None:
    from media.priority import lower_thread

    lower_thread(0)  # the whole process: it has one thread
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(sys.stdin.buffer, sys.stdout.buffer)
    os._exit(0)  # the server has gone: nothing to flush


if __name__ == "__main__":
    main()
