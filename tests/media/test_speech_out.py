"""The speech sender: pacing from the clock, one timer for every session on phases of their own, a failing
session ends alone."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
from collections.abc import Callable

import pytest
from aiortc.mediastreams import MediaStreamError

from media.framer import OutputFramer
from media.speech_out import OutboundSpeech, SpeechPacer, SpeechTicker


def test_the_pacer_gives_a_frame_a_period_catches_up_a_short_delay_and_moves_after_a_stall():
    pacer = SpeechPacer(0.02, max_lag=0.1)
    assert [pacer.due(t / 1000) for t in (0, 9, 20, 29, 41)] == [1, 0, 1, 0, 1]
    assert pacer.due(0.0595) == 1  # a tick a little early still sends its frame
    assert pacer.due(0.125) == 3  # 45 ms late: the frames due at 80, 100 and 120 ms, no more
    assert pacer.due(0.128) == 0
    assert pacer.late_resets == 0
    assert pacer.due(0.5) == 1  # the loop stalled 360 ms: one frame, and the schedule starts again from here
    assert pacer.late_resets == 1
    assert [pacer.due(0.5 + t / 1000) for t in (9, 20, 40)] == [0, 1, 1]


def test_a_late_first_tick_does_not_cost_a_frame_when_the_next_are_on_time():
    pacer = SpeechPacer(0.02)
    assert pacer.due(0.004) == 1  # the slot's first tick, 4 ms late
    assert [pacer.due(k * 0.02) for k in range(1, 50)] == [1] * 49  # every tick on time: a frame each


class Session:
    def __init__(self, fails: type[Exception] | None = None) -> None:
        self.pacer = SpeechPacer(0.02)
        self.calls: list[float] = []
        self.fails = fails
        self.faults: list[Exception] = []

    def send_due(self, now: float) -> None:
        self.pacer.due(now)
        self.calls.append(now)
        if self.fails is not None and len(self.calls) == 3:
            raise self.fails("broken")

    def on_fault(self, exc: Exception) -> None:
        self.faults.append(exc)


class ManualLoop:
    """`call_later` on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, int, Callable[[], None], asyncio.Handle]] = []
        self.wakeups = 0

    def call_later(self, delay: float, callback: Callable[[], None]) -> asyncio.Handle:
        handle = asyncio.Handle(lambda: None, (), asyncio.new_event_loop())
        heapq.heappush(self.timers, (self.now + delay, next(ORDER), callback, handle))
        return handle

    def run_until(self, t: float) -> None:
        while self.timers and self.timers[0][0] <= t:
            at, _, callback, handle = heapq.heappop(self.timers)
            if not handle.cancelled():
                self.now = at
                self.wakeups += 1
                callback()
        self.now = t


ORDER = itertools.count()


def test_one_timer_serves_every_session_in_slots_of_the_period_and_a_failing_one_ends_alone():
    loop = ManualLoop()
    ticker = SpeechTicker(loop, clock=lambda: loop.now)  # type: ignore[arg-type]
    sessions = [Session() for _ in range(5)]
    broken, closed = Session(RuntimeError), Session(ConnectionError)
    for s in [*sessions, broken, closed]:
        ticker.add(s)  # type: ignore[arg-type]
    assert sorted(map(len, ticker.slots)) == [1, 2, 2, 2]  # spread over the period's four phases
    loop.run_until(0.3)
    ms = [[round(t * 1000) for t in s.calls] for s in sessions]
    assert ms[0] == list(range(0, 300, 20))  # on its slot's tick, every 20 ms
    phases = sorted({calls[0] for calls in ms} | {round(broken.calls[0] * 1000), round(closed.calls[0] * 1000)})
    assert phases == [0, 5, 10, 15]
    assert len(broken.calls) == len(closed.calls) == 3  # dropped at the third
    assert [str(e) for e in broken.faults] == ["broken"] and not closed.faults  # a closed peer is no fault
    assert loop.wakeups == 60  # one timer, every 5 ms, whatever the number of sessions
    for s in sessions[:-1]:
        ticker.discard(s)  # type: ignore[arg-type]
    assert ticker.running
    ticker.discard(sessions[-1])  # type: ignore[arg-type]
    assert not ticker.running  # the timer stopped with the last session
    n = len(sessions[0].calls)
    loop.run_until(0.5)
    assert len(sessions[0].calls) == n and loop.wakeups == 60


async def test_closed_speech_frees_its_encoder_ends_its_track_and_leaves_the_ticker():
    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    before = threads()
    outbound = OutboundSpeech(OutputFramer())
    ticker = SpeechTicker.of_running_loop()
    ticker.add(outbound)  # as when its sender has started
    assert ticker.running
    outbound.close()
    assert outbound.track.readyState == "ended"  # aiortc's sender, waiting on it, ends
    with pytest.raises(MediaStreamError):
        await outbound.track.recv()
    assert not ticker.running
    assert threads() <= before  # the encoder's threads went with it, not at some later collection
