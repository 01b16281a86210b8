"""One GPU, many sessions: each step gathers the ready work of every session and runs it batched.

Sans-I/O: `submit`, `cancel` and `step` are plain calls (the engine's worker
thread makes them); time comes from an injected clock. A step runs at most one
prefill (the longest piece of work, so decode steps of other sessions are never
held back by more than one), then one batched Thinker step, one batched Talker
step (MTP included) and one batched Code2Wav step. No session waits for another
session's whole turn; when more sessions are ready than `batch_limit`, those
with the least speech ahead of real time go first, and a session more than
`max_ahead_s` ahead sits out so the others catch up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.engines.qwen3_omni.stream import OmniStreamer, Reply, TurnInput

FRAME_S = 0.08
HELD_FRAMES = 2  # frames a speculative turn makes before it waits to be released


@dataclass
class Job:
    key: Hashable
    reply: Reply
    turn: TurnInput | Callable[[], TurnInput]  # built lazily in the worker when it costs (features, images)
    submitted: float
    first_frame_at: float | None = None
    timings: dict[str, float] = field(default_factory=dict)  # for the turn's metrics message (ms)
    held: bool = False  # speculative: made ahead (at the user's first pause), output kept until released
    buffer: list[Out] = field(default_factory=list)
    snapshot: tuple | None = None  # the conversation before a held turn, to undo it if the user goes on

    def ahead_s(self, now: float) -> float:
        """Speech made beyond real time; a job that has not spoken yet is furthest behind."""
        if self.first_frame_at is None:
            return -1e9
        return self.reply.decoded * FRAME_S - (now - self.first_frame_at)


@dataclass(frozen=True)
class Out:
    """What a step produced for one session: `kind` is token, frame, done or error."""

    key: Hashable
    kind: str
    value: Any = None
    reply: Reply | None = None  # which turn it belongs to: a session drops what a cancelled turn still made


@dataclass
class SchedulerStats:
    batches: dict[str, int] = field(default_factory=lambda: {"thinker": 0, "talker": 0, "code2wav": 0})
    batched_items: dict[str, int] = field(default_factory=lambda: {"thinker": 0, "talker": 0, "code2wav": 0})
    stage_s: dict[str, float] = field(
        default_factory=lambda: {"prefill": 0.0, "talker_prefill": 0.0, "thinker": 0.0, "talker": 0.0, "code2wav": 0.0}
    )
    max_batch: int = 0
    last_batch: int = 0  # the largest batch of the latest step


class Scheduler:
    def __init__(
        self,
        streamer: OmniStreamer,
        batch_limit: int = 8,
        lookahead: int = 4,
        max_ahead_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if batch_limit < 1:
            raise ValueError("batch_limit must be at least 1")
        self.streamer = streamer
        self.batch_limit = batch_limit
        self.lookahead = lookahead  # text tokens the Thinker may run ahead of the Talker
        self.max_ahead_s = max_ahead_s
        self.clock = clock
        self.pending: deque[Job] = deque()
        self.active: dict[Hashable, Job] = {}
        self.stats = SchedulerStats()

    # ---- commands ----

    def submit(
        self, key: Hashable, reply: Reply, turn: TurnInput | Callable[[], TurnInput], held: bool = False
    ) -> None:
        """Queue a turn; a session has at most one turn in flight (a new one replaces the old). A `held` turn
        is speculative: it is prefilled and its first frames made, but nothing comes out until `release`."""
        self.cancel(key)
        self.pending.append(Job(key, reply, turn, self.clock(), held=held))

    def release(self, key: Hashable, reply: Reply, fallback: Callable[[], TurnInput]) -> bool:
        """The speculation was right: let the held turn out. If it is gone (failed or never started), the turn
        is submitted afresh from `fallback`. Returns whether the speculation was used."""
        for job in [*self.pending, *self.active.values()]:
            if job.key == key and job.reply is reply and job.held:
                job.held = False
                job.submitted = self.clock()
                job.timings["speculative"] = 1.0
                return True
        self.submit(key, reply, fallback)
        return False

    def cancel(self, key: Hashable) -> bool:
        """Stop a session's turn at once; its conversation keeps what the Thinker already read."""
        found = False
        for job in [j for j in self.pending if j.key == key]:
            self.pending.remove(job)
            found = True
        job = self.active.pop(key, None)
        if job is not None:
            job.reply.cancelled = True
            if job.held:
                self._undo(job)
            found = True
        return found

    def cancel_reply(self, key: Hashable, reply: Reply) -> bool:
        """Cancel the session's turn only if it is still this reply (a newer one may have replaced it)."""
        if any(j.key == key and j.reply is reply for j in [*self.pending, *self.active.values()]):
            return self.cancel(key)
        return False

    @staticmethod
    def _snapshot(conv) -> tuple:
        return (
            conv.length,
            conv.next_pos,
            conv.role,
            len(conv.user_ids),
            len(conv.image_grids),
            len(conv.audio_lengths),
            len(conv.turns),
        )

    def _undo(self, job: Job) -> None:
        """Put the conversation back as it was before the held turn (its cache cropped to the old length)."""
        conv, snap = job.reply.conv, job.snapshot
        if snap is None:
            return
        length, conv.next_pos, conv.role, users, grids, audios, turns = snap
        if conv.cache is not None:
            if length == 0:
                conv.cache = None
            elif conv.cache.get_seq_length() > length:
                conv.cache.crop(length - conv.cache.get_seq_length())  # a negative count: tokens to drop
        del conv.user_ids[users:], conv.user_embeds[users:], conv.image_grids[grids:]
        del conv.audio_lengths[audios:], conv.turns[turns:]

    def mute(self, key: Hashable) -> None:
        """Stop a turn's speech but let its text finish (a tool call is read, not spoken)."""
        job = self.active.get(key)
        if job is not None:
            job.reply.speak = False  # the Talker stops; the Thinker runs on to the end of the call
            del job.reply.frames[job.reply.decoded :]

    def has_work(self) -> bool:
        return bool(self.pending or self.active)

    def runnable(self) -> bool:
        """Whether a step would do anything: not when every active turn is held at its limit."""
        return bool(self.pending) or any(not j.held or j.buffer or self._held_can_run(j) for j in self.active.values())

    def _held_can_run(self, job: Job) -> bool:
        r = job.reply
        return (
            (not r.text_done and self._thinker_may_run(job))
            or (r.speak and not r.speech_done and len(r.frames) < min(len(r.code0), HELD_FRAMES))
            or r.decoded < len(r.frames)
        )

    # ---- one step ----

    def step(self) -> list[Out]:
        self.stats.last_batch = 0
        out: list[Out] = []
        s, now = self.streamer, self.clock()
        for job in self.active.values():
            if not job.held and job.buffer:  # released: what was made ahead goes out first
                if job.first_frame_at is not None:
                    job.first_frame_at = now
                    job.timings["first_frame_ms"] = 0.0
                out += job.buffer
                job.buffer = []
        if out:
            return out  # out at once: this step's compute would hold the released frames back
        if self.pending:
            job = self.pending.popleft()
            out += self._start(job)
        ready = [j for j in self.active.values() if not j.reply.done]

        thinkers = [j for j in ready if not j.reply.text_done and self._thinker_may_run(j)]
        if thinkers:
            batch = self._pick(thinkers, now)
            self._timed("thinker", lambda: s.thinker_step([j.reply for j in batch]), len(batch))
            for j in batch:
                self._emit(out, j, Out(j.key, "token", j.reply.tokens[-1], j.reply))

        talkers = [
            j
            for j in ready
            if j.reply.speak
            and not j.reply.speech_done
            and len(j.reply.frames) < len(j.reply.code0)
            and s.trailing_ready(j.reply)
            and j.ahead_s(now) < self.max_ahead_s
            and (not j.held or len(j.reply.frames) < HELD_FRAMES)
        ]
        if talkers:
            batch = self._pick(talkers, now)
            self._timed("talker", lambda: s.talker_step([j.reply for j in batch]), len(batch))

        decoders = [j for j in ready if j.reply.decoded < len(j.reply.frames)]
        if decoders:
            batch = self._pick(decoders, now)
            pcm: list[np.ndarray] = []
            self._timed("code2wav", lambda: pcm.extend(s.decode_frames([j.reply for j in batch])), len(batch))
            t = self.clock()
            for job, samples in zip(batch, pcm, strict=False):
                if job.first_frame_at is None:
                    job.first_frame_at = t
                    job.timings["first_frame_ms"] = (t - job.submitted) * 1000
                self._emit(out, job, Out(job.key, "frame", samples, job.reply))

        for job in list(self.active.values()):
            r = job.reply
            if r.speak and r.speech_done and r.decoded == len(r.frames) and not r.text_done:
                # The Talker has finished (its EOS or the frame limit): text it will never speak is not made,
                # and the turn ends with its speech rather than leaving the listener in a silent "speaking".
                r.text_done = True
            if job.reply.done and not job.held:
                del self.active[job.key]
                out.append(Out(job.key, "done", job, job.reply))
        return out

    @staticmethod
    def _emit(out: list[Out], job: Job, item: Out) -> None:
        (job.buffer if job.held else out).append(item)

    def _start(self, job: Job) -> list[Out]:
        s, reply = self.streamer, job.reply
        try:
            if job.held:
                job.snapshot = self._snapshot(reply.conv)
            turn = job.turn() if callable(job.turn) else job.turn
            t0 = self.clock()
            s.prefill(reply, turn)
            t1 = self.clock()
            self.stats.stage_s["prefill"] += t1 - t0
            job.timings["prefill_ms"] = (t1 - t0) * 1000
            out: list[Out] = []
            self._emit(out, job, Out(job.key, "token", reply.tokens[0], reply))
            if reply.speak and s.has_talker and reply.tokens[0] != s.eos:
                s.talker_prefill(reply)
                self.stats.stage_s["talker_prefill"] += self.clock() - t1
            else:
                reply.speak = False
            self.active[job.key] = job
            return out
        except Exception as exc:  # bad media for this turn: only this session hears of it
            if job.held:  # a speculation that cannot run is dropped; `release` then starts the turn afresh
                self._undo(job)
                return []
            turns = reply.conv.turns
            if turns and turns[-1][1] is reply.tokens:
                turns.pop()  # a turn that failed is not part of the conversation
            return [Out(job.key, "error", exc, reply)]

    def _thinker_may_run(self, job: Job) -> bool:
        """Text streams ahead of speech by at most `lookahead` tokens (no limit once the Talker stopped);
        a held turn makes no more than it needs for its first frames."""
        reply = job.reply
        if job.held and len(reply.tokens) >= HELD_FRAMES + self.lookahead:
            return False
        return not reply.speak or reply.speech_done or len(reply.tokens) < reply.talker_step + self.lookahead

    def _pick(self, jobs: list[Job], now: float) -> list[Job]:
        if len(jobs) <= self.batch_limit:
            return jobs
        return sorted(jobs, key=lambda j: j.ahead_s(now))[: self.batch_limit]

    def _timed(self, stage: str, fn: Callable[[], Any], n: int) -> None:
        t0 = self.clock()
        fn()
        self.stats.stage_s[stage] += self.clock() - t0
        self.stats.batches[stage] += 1
        self.stats.batched_items[stage] += n
        self.stats.max_batch = max(self.stats.max_batch, n)
        self.stats.last_batch = max(self.stats.last_batch, n)
