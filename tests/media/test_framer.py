import numpy as np

from media.framer import OutputFramer


def speech(n=1920, value=0.25):
    return np.full(n, value, np.float32)


def test_80ms_frame_becomes_four_20ms_frames_with_continuous_pts():
    f = OutputFramer()
    f.push(speech())
    frames = [f.pull() for _ in range(6)]
    assert [fr.pts for fr in frames] == [0, 480, 960, 1440, 1920, 2400]
    assert all(fr.samples.size == 480 and fr.samples.dtype == np.int16 for fr in frames)
    assert all(fr.samples[0] == 8192 for fr in frames[:4])
    assert all(not fr.samples.any() for fr in frames[4:])
    assert f.stats.speech_frames == 4
    assert f.stats.underruns == 2  # still flowing: speech ran dry


def test_end_of_speech_silence_is_not_underrun():
    f = OutputFramer()
    f.push(speech())
    f.end_of_speech()
    for _ in range(8):
        f.pull()
    assert f.stats.underruns == 0 and f.stats.speech_frames == 4


def test_silence_when_empty_and_pts_never_jumps():
    f = OutputFramer()
    pts = [f.pull().pts for _ in range(3)]
    f.push(speech(1365))  # a first frame is shorter
    pts += [f.pull().pts for _ in range(4)]
    assert pts == [i * 480 for i in range(7)]
    assert f.stats.underruns == 2  # the partial third frame and the empty fourth


def test_backlog_cap_bounds_delay():
    f = OutputFramer(max_backlog_ms=160)
    for i in range(10):
        f.push(speech(value=i / 20))
    assert f.backlog_ms == 160
    assert f.stats.dropped_samples == 8 * 1920
    first = f.pull()
    assert first.samples[0] == int(8 / 20 * 32768)  # the freshest audio survived


def test_flush_for_barge_in():
    f = OutputFramer()
    for _ in range(5):
        f.push(speech())
    assert f.flush() == 5 * 1920
    assert not f.pull().samples.any()
    assert f.stats.underruns == 0


def test_48k_output_resamples():
    f = OutputFramer(rate=48_000)
    t = np.arange(1920 * 10) / 24_000
    f.push((0.5 * np.sin(2 * np.pi * 500 * t)).astype(np.float32))
    out = np.concatenate([f.pull().samples for _ in range(35)]).astype(np.float32)
    assert all(fr == 960 for fr in [f.frame_samples])
    peak = np.argmax(np.abs(np.fft.rfft(out[4800:28800]))) * 48_000 / 24_000
    assert abs(peak - 500) < 3
