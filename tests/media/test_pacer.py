"""Pacing from the clock: a frame a period; the server's speech catches up a short delay, not a stall; a live
source sends all it owes."""

from media.pacer import Pacer


def test_the_pacer_gives_a_frame_a_period_catches_up_a_short_delay_and_moves_after_a_stall():
    pacer = Pacer.speech(0.02, max_lag=0.1)
    assert [pacer.due(t / 1000) for t in (0, 9, 20, 29, 41)] == [1, 0, 1, 0, 1]
    assert pacer.due(0.0595) == 1  # a tick a little early still sends its frame
    assert pacer.due(0.125) == 3  # 45 ms late: the frames due at 80, 100 and 120 ms, no more
    assert pacer.due(0.128) == 0
    assert pacer.late_resets == 0
    assert pacer.due(0.505) == 1  # the loop stalled 365 ms: one frame, not the backlog
    assert pacer.late_resets == 1
    # the schedule moved on by whole frames: still on 20 ms steps from 0, not from the late call
    assert [pacer.due(t / 1000) for t in (510, 520, 529, 540)] == [0, 1, 0, 1]


def test_a_late_first_tick_does_not_cost_a_frame_when_the_next_are_on_time():
    pacer = Pacer.speech(0.02)
    assert pacer.due(0.004) == 1  # the slot's first tick, 4 ms late
    assert [pacer.due(k * 0.02) for k in range(1, 50)] == [1] * 49  # every tick on time: a frame each


def test_the_next_frame_is_due_on_the_schedule():
    pacer = Pacer.speech(0.04, max_lag=0.1)
    assert pacer.next_due(5.0) == 5.0  # not started: now
    assert pacer.due(5.0) == 1 and pacer.next_due(5.01) == 5.04
    assert pacer.due(5.09) == 2 and abs(pacer.next_due(5.09) - 5.12) < 1e-9  # 50 ms late: caught up


def test_a_live_source_sends_every_frame_it_owes_one_at_a_time():
    pacer = Pacer(0.02, start=1.0)  # a microphone's clock: its capture began at 1.0
    assert pacer.next_due(0.5) == 1.0 and not pacer.take(0.999)
    assert pacer.take(1.0) and not pacer.take(1.01)
    # the sender stalled 95 ms: the frames captured meanwhile (due at 20, 40, 60, 80 ms) all go at once
    assert [pacer.take(1.095) for _ in range(5)] == [True] * 4 + [False]
    assert pacer.late_resets == 0
    assert abs(pacer.next_due(1.095) - 1.1) < 1e-9  # and the clock is still the capture's
    assert pacer.take(1.1)


def test_frames_owed_are_due_now():
    pacer = Pacer(0.1)
    assert pacer.take(0.0) and pacer.next_due(0.0) == 0.0 + 0.1
    assert pacer.take(0.35)  # three owed: this one, and two more
    assert pacer.next_due(0.35) == 0.35
    assert pacer.take(0.35) and pacer.take(0.35) and not pacer.take(0.35)
