"""The adaptive jitter buffer: nothing waits on a clean line; a reordered packet waits for the one before it; a
lost one is given up once later than the line's jitter, with the next packet for its FEC; the target follows
the jitter up and back down."""

import random

from media.jitter import AdaptiveJitterBuffer, JitterConfig, Slot

FRAME = 960


def payload(k: int) -> bytes:
    return k.to_bytes(4, "big")


def arrive(
    buf: AdaptiveJitterBuffer, arrivals: list[tuple[float, int]], first_seq: int = 0, first_ts: int = 7
) -> list[Slot]:
    """Packets k at their arrival times (sent every 20 ms), polled at each arrival as the adapter's timer does."""
    out: list[Slot] = []
    for at, k in sorted(arrivals):
        due = buf.deadline()
        if due is not None and due <= at:
            out += buf.poll(due)
        out += buf.push((first_seq + k) % 65536, (first_ts + k * FRAME) % 2**32, payload(k), at)
    return out


def test_on_a_clean_line_every_packet_goes_as_it_arrives():
    buf = AdaptiveJitterBuffer()
    for k in range(100):
        slots = buf.push(k, k * FRAME, payload(k), k * 0.02 + 0.0003 * (k % 3))
        assert [s.payload for s in slots] == [payload(k)]
    assert buf.stats.target_ms == 0.0 and buf.stats.waits == 0 and buf.deadline() is None
    slots = buf.push(101, 101 * FRAME, payload(101), 101 * 0.02)  # 100 lost: no jitter, so not waited for
    assert [s.payload for s in slots] == [None, payload(101)]


def test_a_packet_ahead_of_its_turn_waits_for_the_one_before_it():
    buf = AdaptiveJitterBuffer()
    assert buf.push(0, 0, payload(0), 0.0)
    assert buf.push(2, 2 * FRAME, payload(2), 0.04) == []  # 1 is missing: 2 waits
    assert buf.stats.depth == 1
    slots = buf.push(1, FRAME, payload(1), 0.055)  # 15 ms late: both go, in order
    assert [s.payload for s in slots] == [payload(1), payload(2)]
    assert buf.stats.lost == 0 and buf.stats.waits == 1


def test_a_lost_packet_is_given_up_once_later_than_the_jitter_and_the_next_one_offered_for_its_fec():
    rng = random.Random(1)
    buf = AdaptiveJitterBuffer()
    arrive(buf, [(k * 0.02 + rng.uniform(0, 0.03), k) for k in range(100)])
    target = buf.stats.target_ms
    assert 25 < target <= 34
    assert buf.push(101, 101 * FRAME + 7, payload(101), 101 * 0.02) == []  # 100 is lost
    due = buf.deadline()
    assert due is not None and abs(due - (100 * 0.02 + target / 1000)) < 0.005
    assert buf.poll(due - 0.001) == []
    lost, nxt = buf.poll(due)
    assert lost.payload is None and lost.following == payload(101) and lost.samples == FRAME
    assert lost.timestamp == 100 * FRAME + 7 and nxt.payload == payload(101)
    assert buf.push(100, 100 * FRAME + 7, payload(100), due + 0.01) == []  # too late: counted, not played
    assert (buf.stats.lost, buf.stats.late) == (1, 1)


def test_from_a_sender_that_adds_fec_a_lost_packet_waits_for_the_next_one_which_carries_its_copy():
    rng = random.Random(1)
    buf = AdaptiveJitterBuffer(carries_fec=lambda payload: True)
    arrive(buf, [(k * 0.02 + rng.uniform(0, 0.03), k) for k in range(100)])
    target = buf.stats.target_ms
    assert buf.push(102, 102 * FRAME + 7, payload(102), 102 * 0.02) == []  # 100 lost, 101 still on its way
    due = buf.deadline()
    assert due is not None and abs(due - (101 * 0.02 + target / 1000)) < 0.005  # a frame past 100's own time
    assert buf.poll(due - 0.001) == []
    lost, *rest = buf.push(101, 101 * FRAME + 7, payload(101), due - 0.001)  # 100's time is past: it goes now
    assert lost.payload is None and lost.following == payload(101)
    assert [s.payload for s in rest] == [payload(101), payload(102)]


def test_the_target_grows_with_jitter_and_falls_back_when_the_line_calms():
    rng = random.Random(2)
    buf = AdaptiveJitterBuffer(config=JitterConfig(window=150))
    jittery = [(k * 0.02 + rng.uniform(0, 0.04), k) for k in range(300)]
    slots = arrive(buf, jittery)
    assert 36 < buf.stats.target_ms <= 45
    assert [s.payload for s in slots] == [payload(k) for k in range(300)]  # every packet, in order, none late
    assert buf.stats.late == 0 and buf.stats.lost == 0 and buf.stats.waits > 20
    calm = [(k * 0.02 + 0.04, k) for k in range(300, 500)]  # the same base delay, no jitter
    arrive(buf, calm)
    assert buf.stats.target_ms == 0.0


def test_a_long_gap_is_left_to_the_aligner():
    buf = AdaptiveJitterBuffer(config=JitterConfig(max_fill_ms=60))
    buf.push(0, 0, payload(0), 0.0)
    slots = buf.push(10, 10 * FRAME, payload(10), 0.2)  # 9 packets gone: 180 ms, longer than the 60 allowed
    assert [s.payload for s in slots] == [payload(10)]
    assert (buf.stats.lost, buf.stats.skipped) == (9, 9)


def test_a_full_buffer_gives_up_its_oldest_gap_at_once():
    buf = AdaptiveJitterBuffer(config=JitterConfig(capacity=2))
    buf.push(0, 0, payload(0), 0.0)
    assert buf.push(2, 2 * FRAME, payload(2), 0.045) == buf.push(3, 3 * FRAME, payload(3), 0.045) == []
    slots = buf.push(4, 4 * FRAME, payload(4), 0.045)  # a third held: 1 is given up before its time
    assert [s.payload for s in slots] == [None, payload(2), payload(3), payload(4)]


def test_sequence_numbers_and_timestamps_wrap():
    buf = AdaptiveJitterBuffer()
    arrivals = [(k * 0.02, k) for k in range(10)]
    arrivals[4], arrivals[5] = (5 * 0.02, 4), (4 * 0.02, 5)  # 5 before 4, across the wrap
    slots = arrive(buf, arrivals, first_seq=65531, first_ts=2**32 - 3 * FRAME)
    assert [s.payload for s in slots] == [payload(k) for k in range(10)]
    assert buf.stats.lost == 0 and buf.stats.late == 0


def test_a_sender_that_starts_its_numbers_over_is_followed_not_dropped_as_late():
    buf = AdaptiveJitterBuffer()
    for k in range(1000, 1010):
        buf.push(k, k * FRAME, payload(k), k * 0.02)
    slots = buf.push(5, 123, payload(5), 20.3)
    assert [s.payload for s in slots] == [payload(5)] and buf.stats.restarts == 1
    assert [s.payload for s in buf.push(6, 123 + FRAME, payload(6), 20.32)] == [payload(6)]
    assert buf.stats.target_ms < 70  # measured afresh: the old stream's timestamps are not this one's
