import numpy as np

from media.framer import OutputFramer
from media.pcm import float_to_s16
from media.turn_taking import Floor


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


def live_framer() -> OutputFramer:
    return OutputFramer(max_backlog_ms=200, trim_above_ms=100)


def test_live_backlog_sheds_silence_past_its_target_and_keeps_the_sound():
    f = live_framer()
    click = np.zeros(1920, np.float32)
    click[1000:1240] = 0.8  # 10 ms of sound late in an 80 ms frame
    f.push(np.zeros(1920, np.float32))
    f.push(click)  # a late frame and the next on-time one: 160 ms queued
    # the head was silence: shed down to 100 ms; the click (40 ms into the second frame) is kept
    assert f.backlog_ms == 100
    assert f.stats.trimmed_samples == 1440 and f.stats.dropped_samples == 0
    out = np.concatenate([f.pull().samples for _ in range(5)])
    assert (out == int(0.8 * 32768)).sum() == 240  # all of it came out


def test_live_backlog_waits_for_a_pause_to_trim_and_drops_sound_only_past_the_cap():
    f = live_framer()
    f.push(speech())
    f.push(speech())  # 160 ms of sound: nothing quiet to shed, nothing over the cap
    assert f.backlog_ms == 160 and f.stats.trimmed_samples == 0
    f.push(np.zeros(1920, np.float32))  # 240 ms: over the cap, the oldest sound goes
    assert f.backlog_ms == 200 and f.stats.dropped_samples == 960
    for _ in range(4):
        f.pull()  # 80 ms of sound played; 40 ms of sound then the pause are left
    assert f.stats.trimmed_samples == 0
    f.pull()
    f.pull()  # the rest of the sound; the pause now heads the queue
    assert f.backlog_ms == 80 and f.stats.trimmed_samples == 0  # under the target: nothing shed
    f.push(np.zeros(1920, np.float32))
    assert f.backlog_ms == 100 and f.stats.trimmed_samples == 1440


def test_without_a_trim_target_silence_is_kept():
    f = OutputFramer(max_backlog_ms=400)
    for _ in range(4):
        f.push(np.zeros(1920, np.float32))
    assert f.backlog_ms == 320 and f.stats.trimmed_samples == 0


def test_a_held_floor_plays_silence_and_the_reply_resumes_where_it_paused():
    f = OutputFramer(rate=24_000, in_rate=24_000)
    floor = Floor()
    f.floor = floor
    sent: list[np.ndarray] = []
    f.listener = sent.append
    ramp = (np.arange(4 * 480, dtype=np.float32) + 1) / 8192
    f.push(ramp)
    first = f.pull().samples.copy()
    floor.held = True
    held = [f.pull().samples.copy() for _ in range(3)]
    floor.held = False
    second = f.pull().samples
    assert all(not h.any() for h in held) and f.stats.held_frames == 3
    assert f.backlog_ms == 40  # nothing was lost while held
    assert second[0] == float_to_s16(ramp[480:481])[0]  # it goes on from the sample after the first frame
    assert len(sent) == 5 and np.array_equal(sent[0], first)  # every frame handed out was heard, silence too


def test_a_cut_floor_drops_the_reply_at_the_next_frame():
    f = OutputFramer(rate=24_000, in_rate=24_000)
    f.floor = floor = Floor(held=True)
    f.push(np.full(4 * 480, 0.25, np.float32))
    floor.cut = True  # a barge-in judged meant while the reply was held
    assert not f.pull().samples.any()
    assert f.backlog_ms == 0 and f.stats.flushed_samples == 4 * 480
    assert not floor.held and not floor.cut
