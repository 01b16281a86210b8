"""Pacing from the clock: a frame a period, a short delay caught up, a stall not sent as a burst."""

from media.pacer import SpeechPacer


def test_the_pacer_gives_a_frame_a_period_catches_up_a_short_delay_and_moves_after_a_stall():
    pacer = SpeechPacer(0.02, max_lag=0.1)
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
    pacer = SpeechPacer(0.02)
    assert pacer.due(0.004) == 1  # the slot's first tick, 4 ms late
    assert [pacer.due(k * 0.02) for k in range(1, 50)] == [1] * 49  # every tick on time: a frame each


def test_the_next_frame_is_due_on_the_schedule():
    pacer = SpeechPacer(0.04, max_lag=0.1)
    assert pacer.next_due(5.0) == 5.0  # not started: now
    assert pacer.due(5.0) == 1 and pacer.next_due(5.01) == 5.04
    assert pacer.due(5.09) == 2 and abs(pacer.next_due(5.09) - 5.12) < 1e-9  # 50 ms late: caught up
