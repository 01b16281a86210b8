"""The speech sender: one timer for every session on phases of their own, a failing
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
from media.pacer import Pacer
from media.rtc.speech_out import OutboundSpeech, SpeechTicker


class Session:
    def __init__(self, fails: type[Exception] | None = None) -> None:
        self.pacer = Pacer.speech(0.02)
        self.calls: list[float] = []
        self.sent = 0
        self.fails = fails
        self.faults: list[Exception] = []

    def send_due(self, now: float) -> None:
        self.sent += self.pacer.due(now)
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
                self.now = max(self.now, at)  # a timer due during a stall runs late
                self.wakeups += 1
                callback()
        self.now = t

    def stall(self, seconds: float) -> None:
        """The loop was busy: no timer ran."""
        self.now += seconds


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


@pytest.mark.parametrize("stall_ms", [7, 45, 150])
def test_after_a_late_or_stalled_loop_every_session_stays_on_its_phase_and_no_frame_is_lost(stall_ms):
    loop = ManualLoop()
    ticker = SpeechTicker(loop, clock=lambda: loop.now)  # type: ignore[arg-type]
    sessions = [Session() for _ in range(8)]
    for s in sessions:
        ticker.add(s)  # type: ignore[arg-type]
    loop.run_until(0.1)
    loop.stall(stall_ms / 1000)
    loop.run_until(0.6)
    for s in sessions:  # times on the ManualLoop's clock, not the wall's: exact on any machine
        ms = [round(t * 1000) for t in s.calls]
        assert {t % 20 for t in ms} == {ms[0]}, ms  # its slot's ticks: the grid did not move with the stall
        assert all(b - a == 20 for a, b in itertools.pairwise(ms) if a > 100 + stall_ms)  # and a tick each period after
        due = len(range(ms[0], 600, 20))
        if stall_ms <= 100:  # the frames due during the stall went as soon as it ended
            assert s.sent == due and s.pacer.late_resets == 0
        else:  # one frame for the stall, not its backlog (the framer keeps it; live output sheds pauses)
            assert s.sent == due - stall_ms // 20 and s.pacer.late_resets == 1


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
