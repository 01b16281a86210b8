from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from media import clock


def test_tick_constants_agree():
    assert clock.samples_per_tick(16_000) == 1280
    assert clock.samples_per_tick(24_000) == 1920
    assert clock.samples_per_tick(44_100) == Fraction(3528)
    assert clock.samples_per_tick(22_050) == Fraction(1764)
    assert clock.samples_per_tick(11_025) == Fraction(882)


def test_tick_sample_round_trip_at_fractional_rate():
    # 7777 Hz has 622.16 samples a tick: the first sample of a tick rounds up
    for rate in (8000, 11_000, 16_000, 44_100, 48_000, 7_777):
        for tick in (0, 1, 7, 12_345):
            first = clock.tick_to_sample(tick, rate)
            assert clock.sample_to_tick(first, rate) == tick
            if tick:
                assert clock.sample_to_tick(first - 1, rate) == tick - 1


@given(st.integers(0, 10**9), st.sampled_from([Fraction(1, 90_000), Fraction(1, 48_000), Fraction(1, 1000)]))
def test_pts_tick_consistent(pts, tb):
    tick = clock.pts_to_tick(pts, tb)
    assert clock.tick_to_seconds(tick) <= pts * tb < clock.tick_to_seconds(tick + 1)


@given(st.integers(0, 10**9), st.sampled_from([8000, 16_000, 44_100, 48_000]))
def test_sample_pts_round_trip(index, rate):
    tb = Fraction(1, rate)
    assert clock.pts_to_sample(clock.sample_to_pts(index, rate, tb), tb, rate) == index
    assert clock.sample_to_pts(index, rate, Fraction(1, 90_000)) == round(Fraction(index * 90_000, rate))


def test_virtual_clock():
    c = clock.VirtualClock(5.0)
    c.advance(0.08)
    assert c() == 5.08
