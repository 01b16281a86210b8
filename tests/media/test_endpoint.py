import numpy as np

from media.endpoint import EndpointConfig, Endpointer, EndpointEvent, Utterance


def tone(level=0.2):
    return (level * np.sin(np.arange(1280) * 2 * np.pi * 300 / 16_000)).astype(np.float32)


QUIET = np.zeros(1280, np.float32)


def run(ep, ticks):
    return [(i, ev) for i, a in enumerate(ticks) if (ev := ep.update(i, a)) is not None]


def test_start_pause_and_end():
    ep = Endpointer(EndpointConfig(end_silence_ms=400, pause_ms=160))
    ticks = [QUIET] * 5 + [tone()] * 10 + [QUIET] * 10
    events = run(ep, ticks)
    assert events == [(6, EndpointEvent.START), (16, EndpointEvent.PAUSE), (19, EndpointEvent.END)]
    assert ep.start_tick == 5 and ep.last_voiced_tick == 14


def test_resume_after_pause():
    ep = Endpointer(EndpointConfig(end_silence_ms=400, pause_ms=160))
    ticks = [QUIET] + [tone()] * 4 + [QUIET] * 3 + [tone()] * 3 + [QUIET] * 6
    kinds = [e for _, e in run(ep, ticks)]
    assert kinds == [
        EndpointEvent.START,
        EndpointEvent.PAUSE,
        EndpointEvent.RESUME,
        EndpointEvent.PAUSE,
        EndpointEvent.END,
    ]


def judged():
    return Endpointer(EndpointConfig(end_silence_ms=480, pause_ms=160))


def feed(ep, ticks, first=0):
    return [(first + i, ev) for i, a in enumerate(ticks) if (ev := ep.update(first + i, a)) is not None]


def test_a_pause_judged_finished_ends_after_the_short_silence():
    ep = judged()
    # speech on ticks 0-4; the pause comes at 160 ms of silence (tick 7)
    assert feed(ep, [tone()] * 5 + [QUIET] * 2) == [(1, EndpointEvent.START), (6, EndpointEvent.PAUSE)]
    assert ep.judge(ep.pauses, 240) is None  # 160 ms silent so far: not yet 240
    assert feed(ep, [QUIET], 7) == [(7, EndpointEvent.END)]  # 240 ms: the end, not at 480
    assert not ep.in_speech and ep.end_after_ms == 480


def test_a_verdict_that_arrives_after_its_silence_ends_the_turn_at_once():
    ep = judged()
    feed(ep, [tone()] * 5 + [QUIET] * 4)  # 320 ms of silence, still no verdict
    assert ep.in_speech
    assert ep.judge(ep.pauses, 240) is EndpointEvent.END
    assert not ep.in_speech


def test_unjudged_or_judged_unsure_waits_the_full_silence():
    for verdict in (480, None):
        ep = judged()
        feed(ep, [tone()] * 5 + [QUIET] * 2)
        if verdict is not None:
            assert ep.judge(ep.pauses, verdict) is None
        assert feed(ep, [QUIET] * 4, 7) == [(10, EndpointEvent.END)]  # 480 ms


def test_a_pause_judged_unfinished_is_held_past_the_full_silence_until_the_user_goes_on():
    ep = judged()
    feed(ep, [tone()] * 5 + [QUIET] * 2)  # "set the temperature to ..."
    assert ep.judge(ep.pauses, 1600) is None
    assert feed(ep, [QUIET] * 10, 7) == []  # 960 ms of silence: still the user's turn
    assert feed(ep, [tone()] * 3, 17) == [(17, EndpointEvent.RESUME)]  # "... twenty one degrees"
    # the hold was that pause's: the next one waits the full silence again
    assert feed(ep, [QUIET] * 6, 20) == [(21, EndpointEvent.PAUSE), (25, EndpointEvent.END)]
    ep = judged()
    feed(ep, [tone()] * 5 + [QUIET] * 2)
    ep.judge(ep.pauses, 1600)
    assert feed(ep, [QUIET] * 20, 7) == [(24, EndpointEvent.END)]  # nobody went on: 1600 ms ends it


def test_a_late_verdict_is_dropped():
    ep = judged()
    feed(ep, [tone()] * 5 + [QUIET] * 2)
    stale = ep.pauses
    feed(ep, [tone()] * 2 + [QUIET] * 2, 7)  # the user went on and paused again
    assert ep.pauses == stale + 1
    assert ep.judge(stale, 240) is None and ep.end_after_ms == 480  # about the first pause: dropped
    assert feed(ep, [QUIET], 11) == []  # still waiting
    ep = judged()
    feed(ep, [tone()] * 5 + [QUIET] * 6)  # the full silence ended the turn
    assert not ep.in_speech and ep.judge(ep.pauses, 240) is None


def test_single_click_is_not_a_turn():
    ep = Endpointer()
    assert run(ep, [QUIET, tone(), QUIET, QUIET]) == []


def test_steady_noise_does_not_hold_turn_open():
    rng = np.random.default_rng(1)
    noise = [(0.03 * rng.standard_normal(1280)).astype(np.float32) for _ in range(100)]
    ep = Endpointer()
    learned = [e for _, e in run(ep, noise)]  # noise from the start looks like speech at first ...
    assert learned[-1] is EndpointEvent.END and not ep.in_speech  # ... but the floor catches up and the turn ends
    loud = [n + tone(0.3) for n in noise[:8]]
    kinds = [e for _, e in run(ep, noise[:5] + loud + noise[:10])]
    assert kinds[0] is EndpointEvent.START and kinds[-1] is EndpointEvent.END


def test_max_turn_length_and_speech_from_the_first_tick():
    ep = Endpointer(EndpointConfig(max_turn_ms=800))
    kinds = [e for _, e in run(ep, [tone()] * 20)]
    assert kinds[:2] == [EndpointEvent.START, EndpointEvent.END]


def test_utterance_keeps_pre_roll_and_cuts_the_silent_tail():

    u = Utterance(pre_roll_ticks=2, tail_ticks=1)
    ticks = [np.full(4, float(i), np.float32) for i in range(10)]
    u.add(ticks[0], None, False)
    u.add(ticks[1], None, False)
    u.add(ticks[2], None, False)
    u.add(ticks[3], EndpointEvent.START, True)  # ticks 1 and 2 are the pre-roll
    for i in range(4, 9):
        u.add(ticks[i], None, True)
    assert len(u) == 8
    # last voiced tick 5, now tick 8: ticks 7 and 8 are silence beyond the one-tick tail
    assert np.array_equal(u.audio(8, 5), np.concatenate(ticks[1:7]))
    assert np.array_equal(u.audio(8, None), np.concatenate(ticks[1:9]))
    u.clear()
    assert u.audio(9, 5).size == 0
