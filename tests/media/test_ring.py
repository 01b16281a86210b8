import pytest
from hypothesis import given
from hypothesis import strategies as st

from media.ring import DropPolicy, RingBuffer


def test_drop_oldest_keeps_freshest_and_counts():
    r: RingBuffer[int] = RingBuffer(3, DropPolicy.DROP_OLDEST)
    for i in range(5):
        assert r.push(i)
    assert r.stats.dropped == 2
    assert [r.pop(), r.pop(), r.pop(), r.pop()] == [2, 3, 4, None]
    assert r.stats.high_water == 3


def test_drop_newest_refuses():
    r: RingBuffer[int] = RingBuffer(2, DropPolicy.DROP_NEWEST)
    assert r.push(1) and r.push(2)
    assert not r.push(3)
    assert r.stats.dropped == 1
    assert [r.pop(), r.pop()] == [1, 2]


def test_pressure_hysteresis_before_any_drop():
    r: RingBuffer[int] = RingBuffer(10, high=6, low=2)
    for i in range(5):
        r.push(i)
    assert not r.pressure
    r.push(5)
    assert r.pressure and r.stats.dropped == 0
    r.pop()
    r.pop()
    r.pop()
    assert r.pressure  # 3 left: still above low
    r.pop()
    assert not r.pressure
    assert r.stats.pressure_events == 1


def test_bad_watermarks():
    with pytest.raises(ValueError):
        RingBuffer(4, high=5)
    with pytest.raises(ValueError):
        RingBuffer(0)
    with pytest.raises(ValueError):
        RingBuffer(4, high=2, low=2)


def test_clear_counts_drops():
    r: RingBuffer[int] = RingBuffer(4)
    r.push(1)
    r.push(2)
    assert r.clear() == 2
    assert r.stats.dropped == 2 and len(r) == 0


@given(
    st.integers(1, 20),
    st.sampled_from(list(DropPolicy)),
    st.lists(st.booleans(), max_size=300),
)
def test_conservation_and_bound(capacity, policy, ops):
    r: RingBuffer[int] = RingBuffer(capacity, policy)
    pushed, popped = [], []
    n = 0
    for is_push in ops:
        if is_push:
            r.push(n)
            pushed.append(n)
            n += 1
        else:
            item = r.pop()
            if item is not None:
                popped.append(item)
        assert len(r) <= capacity
    rest = []
    while (item := r.pop()) is not None:
        rest.append(item)
    out = popped + rest
    # FIFO order, nothing duplicated, and everything missing was counted
    assert out == sorted(out) and len(set(out)) == len(out)
    assert len(pushed) - len(out) == r.stats.dropped
    assert r.stats.high_water <= capacity
