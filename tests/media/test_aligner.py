from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from media.aligner import AlignerConfig, AudioInput, FrameAligner, MediaError, VideoInput

TB16 = Fraction(1, 16_000)
TB90K = Fraction(1, 90_000)


def mono16(samples, pts):
    return AudioInput(np.asarray(samples, np.float32), 16_000, pts, TB16)


def ramp(n):
    """Unique, non-zero sample values so every sample can be traced."""
    return (np.arange(1, n + 1) / (n + 1)).astype(np.float32)


def collect(aligner, frames):
    chunks = []
    for f in frames:
        chunks += aligner.push_audio(f)
    return chunks


def audio_of(chunks):
    return np.concatenate([c.audio for c in chunks]) if chunks else np.zeros(0, np.float32)


def webrtc_frames(seconds=1.0, freq=440.0, rate=48_000, samples=960):
    t = np.arange(int(seconds * rate)) / rate
    x = (0.5 * np.sin(2 * np.pi * freq * t) * 32767).astype(np.int16)
    stereo = np.stack([x, x], axis=1)
    return [
        AudioInput(stereo[i : i + samples].reshape(1, -1), rate, i, Fraction(1, rate), "s16", 2)
        for i in range(0, x.size - samples + 1, samples)
    ]


# ---- audio ----------------------------------------------------------------


@pytest.mark.parametrize("rate,samples", [(48_000, 960), (44_100, 441), (44_100, 1024), (8000, 160)])
def test_any_rate_becomes_16k_ticks(rate, samples):
    a = FrameAligner()
    chunks = collect(a, webrtc_frames(2.0, rate=rate, samples=samples))
    chunks += a.flush()
    assert [c.tick for c in chunks] == list(range(len(chunks)))
    assert all(c.audio.shape == (1280,) and c.audio.dtype == np.float32 for c in chunks)
    assert abs(len(chunks) - 25) <= 1
    x = audio_of(chunks)[1600:30000]
    peak = np.argmax(np.abs(np.fft.rfft(x))) * 16_000 / x.size
    assert abs(peak - 440) < 2
    assert 0.45 < np.abs(x).max() < 0.55


def test_first_tick_is_released_without_waiting():
    a = FrameAligner()
    frames = webrtc_frames(0.2)
    released = [len(a.push_audio(f)) for f in frames]
    # 80 ms of audio plus the resampler's 10 ms: the first tick leaves on the 5th frame
    assert released.index(1) == 4


def test_16k_passthrough_is_exact_for_any_frame_sizes():
    x = ramp(5000)
    sizes = [1, 7, 1280, 333, 2000, 1379]
    frames, pos = [], 0
    for s in sizes:
        frames.append(mono16(x[pos : pos + s], pos))
        pos += s
    a = FrameAligner()
    chunks = collect(a, frames) + a.flush()
    out = audio_of(chunks)
    np.testing.assert_array_equal(out[:5000], x)
    assert a.stats.audio_padded == out.size - 5000
    assert a.stats.audio_samples_filled == a.stats.audio_samples_dropped == 0


def test_reordered_frame_is_put_back_in_place():
    x = ramp(320 * 10)
    frames = [mono16(x[i * 320 : (i + 1) * 320], i * 320) for i in range(10)]
    frames[3], frames[4] = frames[4], frames[3]
    a = FrameAligner()
    out = audio_of(collect(a, frames) + a.flush())
    np.testing.assert_array_equal(out[: x.size], x)
    assert a.stats.audio_reordered == 1 and a.stats.audio_samples_filled == 0


def test_duplicate_frames_are_dropped_and_counted():
    x = ramp(3200)
    frames = [mono16(x[i : i + 320], i) for i in range(0, 3200, 320)]
    frames.insert(4, frames[3])
    frames.insert(1, frames[0])
    a = FrameAligner()
    out = audio_of(collect(a, frames) + a.flush())
    np.testing.assert_array_equal(out[:3200], x)
    assert a.stats.audio_samples_dropped == 640


def test_lost_packet_is_filled_with_silence():
    x = ramp(320 * 20)
    frames = [mono16(x[i : i + 320], i) for i in range(0, x.size, 320)]
    del frames[5]
    a = FrameAligner()
    out = audio_of(collect(a, frames) + a.flush())
    assert a.stats.audio_samples_filled == 320
    assert not out[1600:1920].any()
    np.testing.assert_array_equal(out[:1600], x[:1600])
    np.testing.assert_array_equal(out[1920 : x.size], x[1920:])


def test_late_packet_after_fill_is_dropped_not_duplicated():
    x = ramp(320 * 20)
    frames = [mono16(x[i : i + 320], i) for i in range(0, x.size, 320)]
    late = frames.pop(5)
    frames.insert(12, late)  # far beyond the 40 ms reorder window
    a = FrameAligner()
    out = audio_of(collect(a, frames) + a.flush())
    assert a.stats.audio_samples_filled == 320 and a.stats.audio_samples_dropped == 320
    assert out.size == 6400  # 5 ticks: not one sample more


def test_pts_jump_and_reset_reanchor_without_silence():
    x = ramp(320 * 12)
    frames = [mono16(x[i : i + 320], i) for i in range(0, 1280, 320)]
    frames += [mono16(x[i : i + 320], i + 16_000 * 60) for i in range(1280, 2560, 320)]  # +60 s
    frames += [mono16(x[i : i + 320], i - 2560) for i in range(2560, 3840, 320)]  # reset to 0
    a = FrameAligner()
    out = audio_of(collect(a, frames) + a.flush())
    np.testing.assert_array_equal(out, x)
    assert a.stats.audio_resets == 2 and a.stats.audio_samples_filled == 0


def test_missing_pts_means_contiguous():
    x = ramp(2560)
    a = FrameAligner()
    out = audio_of(collect(a, [mono16(x[i : i + 640], None) for i in range(0, 2560, 640)]))
    np.testing.assert_array_equal(out, x)


def test_rate_change_midstream_keeps_ticks_consecutive():
    a = FrameAligner()
    chunks = collect(a, webrtc_frames(1.0, rate=48_000) + webrtc_frames(1.0, rate=44_100, samples=441))
    chunks += a.flush()
    assert [c.tick for c in chunks] == list(range(len(chunks)))
    assert a.stats.audio_resets == 1
    assert abs(len(chunks) - 25) <= 1


def test_garbage_audio():
    a = FrameAligner()
    bad = np.full(320, np.nan, np.float32)
    a.push_audio(mono16(bad, 0))
    assert a.stats.audio_garbage_samples == 320
    out = audio_of(a.flush())
    assert np.isfinite(out).all() and not out.any()
    with pytest.raises(MediaError, match="sample rate"):
        a.push_audio(AudioInput(np.zeros(10, np.float32), 1, 0, Fraction(1, 1)))
    with pytest.raises(MediaError, match="too long"):
        a.push_audio(mono16(np.zeros(16_000 * 5, np.float32), 320))
    with pytest.raises(MediaError, match="format"):
        a.push_audio(AudioInput(np.zeros(10), 16_000, 0, TB16, "xyz", 1))


# ---- video ----------------------------------------------------------------


def frame_at(t, value=None, shape=(4, 4, 3)):
    v = int(t * 100) % 256 if value is None else value
    return VideoInput(np.full(shape, v, np.uint8), round(t * 90_000), TB90K)


def run_av(aligner, seconds, video_times, lead=0.0, rate=16_000):
    """Push 20 ms audio frames and video frames in arrival order; video arrives `lead` s early."""
    events = [(t - lead, 1, frame_at(t)) for t in video_times]
    step = rate // 50
    events += [(i / rate, 0, mono16(np.zeros(step, np.float32), i)) for i in range(0, int(seconds * rate), step)]
    events.sort(key=lambda e: (e[0], e[1]))
    chunks = []
    for _, kind, item in events:
        if kind:
            aligner.push_video(item)
        else:
            chunks += aligner.push_audio(item)
    return chunks


def test_video_sampled_at_model_rate():
    a = FrameAligner(AlignerConfig(video_fps=2.0))
    times = [i / 30 for i in range(0, 90)]  # 3 s of 30 fps
    chunks = run_av(a, 3.0, times, lead=0.05)
    with_video = [c for c in chunks if c.video is not None]
    assert [c.tick for c in with_video] == [0, 6, 12, 18, 25, 31]
    for c in with_video:
        assert c.video.kind == "exact"
        assert abs(c.video.source - c.video.instant) <= 1 / 60 + 1e-9
    s = a.stats
    assert s.video_exact == 6 and s.video_missing == 0
    # every frame up to the last instant was either used or dropped (counted)
    assert s.video_dropped == sum(1 for t in times if t <= 2.5) - 6


def test_video_gap_is_blended_then_repeated_then_missing():
    cfg = AlignerConfig(video_fps=2.0, video_tolerance_s=0.05)
    a = FrameAligner(cfg)
    # frames at 0.0, 0.3 (gap), then 0.7 .. 1.0 then nothing for 4 s
    times = [0.0, 0.3, 0.7, 1.0]
    chunks = run_av(a, 4.0, times, lead=0.5)
    videos = {c.tick: c.video for c in chunks if c.tick in (0, 6, 12, 18, 25, 31, 37, 43, 50)}
    assert videos[0].kind == "exact"
    assert videos[6].kind == "blend"  # 0.5 s: between 0.3 and 0.7
    assert videos[6].image[0, 0, 0] == round((30 + 70) / 2)
    assert videos[12].kind == "exact"  # 1.0 s
    assert videos[18].kind == "repeat" and videos[18].source == pytest.approx(1.0)
    assert videos[37].kind == "repeat"  # 3.0 s: exactly 2 s old, still shown
    assert videos[43] is None  # 3.5 s: the last frame is stale
    assert a.stats.video_blended == 1 and a.stats.video_repeated >= 1 and a.stats.video_missing >= 1


def test_video_duplicates_and_late_frames():
    a = FrameAligner()
    a.push_video(frame_at(0.0))
    a.push_video(frame_at(0.0))
    assert a.stats.video_duplicates == 1
    run_av(a, 1.0, [0.1 * i for i in range(1, 10)])
    a.push_video(frame_at(0.05))  # before the last instant (0.5 s): too late
    assert a.stats.video_late == 1


def test_video_clock_drift_and_reset_resync():
    a = FrameAligner()
    # the camera clock runs 5 % fast: after ~20 s it is a second ahead
    times = [i / 10 for i in range(300)]
    events = [(t, 1, VideoInput(np.zeros((2, 2, 3), np.uint8), round(t * 1.05 * 90_000), TB90K)) for t in times]
    events += [(i / 50, 0, mono16(np.zeros(320, np.float32), i * 320)) for i in range(1500)]
    events.sort(key=lambda e: (e[0], e[1]))
    chunks = []
    for _, kind, item in events:
        chunks += [] if kind else a.push_audio(item)
        if kind:
            a.push_video(item)
    assert a.stats.video_resyncs >= 1
    assert all(c.video is not None for c in chunks if c.tick % 25 in (0, 6, 12, 18))
    # a reset of the video pts back to 0 resyncs too
    before = a.stats.video_resyncs
    a.push_video(VideoInput(np.zeros((2, 2, 3), np.uint8), 0, TB90K))
    assert a.stats.video_resyncs == before + 1


def test_garbage_video_raises():
    a = FrameAligner()
    a.push_video(VideoInput(np.zeros((4, 4), np.uint8), 0, TB90K))
    with pytest.raises(MediaError, match="shape"):
        collect(a, [mono16(np.zeros(1280, np.float32), 0)])


def test_fps_limit():
    with pytest.raises(ValueError):
        AlignerConfig(video_fps=30)


# ---- properties ------------------------------------------------------------

frame_sizes = st.lists(st.integers(1, 1500), min_size=2, max_size=40)
perturbation = st.sampled_from(["keep", "keep", "keep", "drop", "dup", "swap"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame_sizes, st.lists(perturbation, min_size=40, max_size=40))
def test_no_sample_lost_or_duplicated_unless_counted(sizes, perturb):
    total = sum(sizes)
    x = ramp(total)
    frames, pos = [], 0
    for s in sizes:
        frames.append(mono16(x[pos : pos + s], pos))
        pos += s
    sent = [frames[0]]
    i = 1
    while i < len(frames):
        p = perturb[i % len(perturb)]
        if p == "drop":
            pass
        elif p == "dup":
            sent += [frames[i], frames[i]]
        elif p == "swap" and i + 1 < len(frames):
            sent += [frames[i + 1], frames[i]]
            i += 1
        else:
            sent.append(frames[i])
        i += 1
    a = FrameAligner()
    chunks = collect(a, sent)
    chunks += a.flush()
    s = a.stats
    assert [c.tick for c in chunks] == list(range(len(chunks)))
    out = audio_of(chunks)
    body = out[: out.size - s.audio_padded]
    filled = body == 0
    assert int(filled.sum()) == s.audio_samples_filled
    # every sample that is not counted as filled is the original one, in place
    np.testing.assert_array_equal(body[~filled], x[: body.size][~filled])
    # conservation: what came in was either placed or counted as dropped
    placed = body.size - s.audio_samples_filled
    assert s.audio_samples_in == placed + s.audio_samples_dropped
    assert s.audio_resets == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("a"),
                st.integers(-50_000, 10**7),
                st.integers(0, 2000),
                st.sampled_from([8000, 16_000, 48_000]),
            ),
            st.tuples(st.just("v"), st.integers(-(10**6), 10**9), st.just(0), st.just(0)),
        ),
        max_size=200,
    )
)
def test_memory_bounded_under_any_input(ops):
    cfg = AlignerConfig()
    a = FrameAligner(cfg)
    last_tick = -1
    for kind, pts, n, rate in ops:
        if kind == "a":
            for c in a.push_audio(AudioInput(np.ones(n, np.float32) * 0.1, rate, pts, Fraction(1, rate))):
                assert c.tick == last_tick + 1
                last_tick = c.tick
        else:
            a.push_video(VideoInput(np.zeros((2, 2, 3), np.uint8), pts, TB90K))
        assert len(a._pending) <= cfg.max_pending_audio
        assert len(a._frames) <= cfg.max_video_frames
        assert a._out_len < 1280 + 3000


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 4.0), min_size=1, max_size=60),
    st.sampled_from([1.0, 2.0, 5.0]),
)
def test_video_choice_is_nearest_frame(raw_times, fps):
    times = sorted({round(t, 3) for t in raw_times} | {0.0})
    cfg = AlignerConfig(video_fps=fps)
    a = FrameAligner(cfg)
    chunks = run_av(a, 4.0, times, lead=0.3)  # every neighbour has arrived in time
    for c in chunks:
        if c.video is None:
            continue
        s = c.video.instant
        nearest = min(times, key=lambda t: (abs(t - s), t))
        if abs(nearest - s) <= cfg.video_tolerance_s:
            assert c.video.kind == "exact"
            assert c.video.source == pytest.approx(nearest, abs=1e-6)
        else:
            assert c.video.kind in ("blend", "repeat")
