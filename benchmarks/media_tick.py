"""Micro-benchmark: CPU per 80 ms tick of one session's whole media path.

Per tick: four 20 ms WebRTC audio frames (48 kHz s16 stereo, as PyAV frames)
and one 640x480 yuv420p video frame go through the aligner (2 fps model rate,
picked frames converted to RGB), the chunk queue, and one 80 ms speech frame
through the output framer (four 20 ms packets out). Prints the figure and
writes JSON. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import platform
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from benchmarks.harness import write_result
from media.aligner import FrameAligner
from media.av_convert import audio_input, to_rgb, video_input
from media.chunk_queue import ChunkQueue
from media.framer import OutputFramer


def make_inputs(ticks: int) -> tuple[list[av.AudioFrame], list[av.VideoFrame]]:
    rng = np.random.default_rng(0)
    audio = []
    for i in range(ticks * 4):
        pcm = (rng.standard_normal(1920) * 3000).astype(np.int16).reshape(1, -1)
        f = av.AudioFrame.from_ndarray(pcm, format="s16", layout="stereo")
        f.sample_rate, f.pts, f.time_base = 48_000, i * 960, Fraction(1, 48_000)
        audio.append(f)
    base = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
    video = []
    for i in range(ticks):
        f = av.VideoFrame.from_ndarray(np.roll(base, i, axis=1), format="rgb24").reformat(format="yuv420p")
        f.pts, f.time_base = i * 7200, Fraction(1, 90_000)
        video.append(f)
    return audio, video


def run(ticks: int) -> dict:
    audio, video = make_inputs(ticks)
    aligner = FrameAligner(to_image=to_rgb)
    queue = ChunkQueue(capacity=64)
    framer = OutputFramer()
    speech = np.zeros(1920, np.float32)
    out = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(ticks):
        aligner.push_video(video_input(video[i]))
        for f in audio[i * 4 : i * 4 + 4]:
            for chunk in aligner.push_audio(audio_input(f)):
                queue.push(chunk)
        while queue.pop() is not None:
            out += 1
        framer.push(speech)
        for _ in range(4):
            framer.pull()
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t0
    s = aligner.stats
    return {
        "benchmark": "media_tick",
        "ticks": ticks,
        "chunks_out": out,
        "video_sampled": s.video_sampled,
        "cpu_ms_per_tick": cpu * 1000 / ticks,
        "wall_ms_per_tick": wall * 1000 / ticks,
        "real_time_factor": wall / (ticks * 0.08),
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=Path("results/media_tick.json"))
    args = ap.parse_args()
    run(50)  # warm up
    result = min((run(args.ticks) for _ in range(3)), key=lambda r: r["cpu_ms_per_tick"])
    print(
        f"media path: {result['cpu_ms_per_tick']:.3f} ms CPU per 80 ms tick "
        f"(audio 4x20 ms 48 kHz stereo + one 640x480 video frame, best of 3 x {args.ticks} ticks; "
        f"{result['video_sampled']} frames sampled at 2 fps)"
    )
    write_result(args.json, result)


if __name__ == "__main__":
    main()
