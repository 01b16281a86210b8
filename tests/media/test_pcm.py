import numpy as np
import pytest

from media.pcm import PcmError, StreamResampler, float_to_s16, to_mono_float32


def test_packed_s16_stereo_downmix():
    left = np.array([1000, -2000, 32767], np.int16)
    right = np.array([3000, 2000, 32767], np.int16)
    packed = np.stack([left, right], axis=1).reshape(1, -1)
    mono = to_mono_float32(packed, "s16", 2)
    assert mono.dtype == np.float32
    np.testing.assert_allclose(mono, [2000 / 32768, 0.0, 32767 / 32768], rtol=1e-6)


def test_planar_float_and_mono():
    planar = np.array([[0.5, -0.5], [0.25, 0.25]], np.float32)
    np.testing.assert_allclose(to_mono_float32(planar, "fltp", 2), [0.375, -0.125])
    np.testing.assert_allclose(to_mono_float32(np.array([0.1, 0.2], np.float32), "flt", 1), [0.1, 0.2])


def test_bad_shapes_and_formats():
    with pytest.raises(PcmError):
        to_mono_float32(np.zeros((1, 5), np.int16), "s16", 2)
    with pytest.raises(PcmError):
        to_mono_float32(np.zeros((3, 5), np.float32), "fltp", 2)
    with pytest.raises(PcmError):
        to_mono_float32(np.zeros(4), "weird", 1)
    with pytest.raises(PcmError):
        to_mono_float32(np.zeros(4), "flt", 0)


def test_float_to_s16_clips():
    out = float_to_s16(np.array([2.0, -2.0, 0.5], np.float32))
    assert out.tolist() == [32767, -32768, 16384]


@pytest.mark.parametrize("rate", [48_000, 44_100, 22_050, 8000])
def test_resampler_keeps_frequency_and_length(rate):
    rs = StreamResampler(rate, 16_000)
    t = np.arange(rate) / rate
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    step = rate // 50
    out = np.concatenate(
        [rs.process(x[i : i + step]) for i in range(0, rate, step)] + [rs.process(np.zeros(0, np.float32), last=True)]
    )
    assert abs(out.size - 16_000) <= 2
    spectrum = np.abs(np.fft.rfft(out[2000:14000]))
    peak_hz = np.argmax(spectrum) * 16_000 / 12_000
    assert abs(peak_hz - 440) < 3


def test_resampler_identity_is_exact():
    x = np.random.default_rng(0).standard_normal(999).astype(np.float32)
    assert StreamResampler(16_000, 16_000).process(x) is x


def test_webrtc_fast_path_matches_general_downmix():
    x = np.random.default_rng(3).integers(-32768, 32767, (1, 1920), dtype=np.int16)
    fast = to_mono_float32(x, "s16", 2)
    general = x.reshape(-1, 2).astype(np.float64).mean(axis=1) / 32768
    np.testing.assert_allclose(fast, general, rtol=1e-6, atol=1e-7)
