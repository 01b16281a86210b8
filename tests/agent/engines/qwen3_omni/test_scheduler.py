"""The scheduler batches the ready work of many sessions; each session's output is what it gets alone."""

from __future__ import annotations

import numpy as np
import torch

from agent.engines.qwen3_omni.scheduler import Scheduler
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply
from tests.agent.engines.qwen3_omni.helpers import noise, prompter

SYSTEM = "You are a helpful assistant."


def run(scheduler: Scheduler, jobs: dict, max_steps: int = 2000) -> dict:
    """Submit every job, step until all are done; returns per key: tokens, codes, pcm."""
    got = {k: {"tokens": [], "pcm": []} for k in jobs}
    for key, turn in jobs.items():
        scheduler.submit(key, Reply(Conversation(), speak=True, max_text_tokens=20, max_frames=30), turn)
    for _ in range(max_steps):
        if not scheduler.has_work():
            break
        for out in scheduler.step():
            if out.kind == "token":
                got[out.key]["tokens"].append(out.value)
            elif out.kind == "frame":
                got[out.key]["pcm"].append(out.value)
            elif out.kind == "done":
                got[out.key]["codes"] = torch.stack(out.value.reply.frames)
            else:
                raise AssertionError(out)
    assert not scheduler.has_work()
    return got


def turns(tiny):
    p = prompter(tiny)
    return {
        "a": p.turn(audio=noise(1.0, 1), system=SYSTEM),
        "b": p.turn(audio=noise(3.1, 2), text="tell me more", system=SYSTEM),
        "c": p.turn(text="hello there", system=SYSTEM),
    }


def test_batched_equals_alone(tiny):
    streamer = OmniStreamer(tiny.model)
    jobs = turns(tiny)
    batched = Scheduler(streamer, batch_limit=8)
    together = run(batched, jobs)
    assert batched.stats.max_batch == 3  # the three sessions really shared steps
    assert batched.stats.batched_items["talker"] > batched.stats.batches["talker"]
    for key, turn in jobs.items():
        alone = run(Scheduler(streamer, batch_limit=1), {key: turn})[key]
        assert together[key]["tokens"] == alone["tokens"], key
        assert torch.equal(together[key]["codes"], alone["codes"]), key
        a, b = np.concatenate(together[key]["pcm"]), np.concatenate(alone["pcm"])
        assert a.shape == b.shape
        assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-3, key  # float32: batched kernels round differently


def test_batch_limit_is_kept_and_nobody_waits_for_a_whole_turn(tiny):
    streamer = OmniStreamer(tiny.model)
    sched = Scheduler(streamer, batch_limit=2)
    jobs = turns(tiny)
    first_frame_step: dict[str, int] = {}
    for key, turn in jobs.items():
        sched.submit(key, Reply(Conversation(), speak=True, max_text_tokens=20, max_frames=30), turn)
    step = 0
    while sched.has_work() and step < 2000:
        step += 1
        for out in sched.step():
            if out.kind == "frame":
                first_frame_step.setdefault(out.key, step)
    assert sched.stats.max_batch == 2
    # every session speaks within a few steps of its prefill, not after the others' whole turns (~30 frames)
    assert max(first_frame_step.values()) <= 8, first_frame_step


def test_cancel_stops_only_that_session(tiny):
    streamer = OmniStreamer(tiny.model)
    sched = Scheduler(streamer, batch_limit=8)
    jobs = turns(tiny)
    frames = {k: 0 for k in jobs}
    for key, turn in jobs.items():
        sched.submit(key, Reply(Conversation(), speak=True, max_text_tokens=20, max_frames=30), turn)
    for _ in range(6):
        for out in sched.step():
            frames[out.key] += out.kind == "frame"
    assert sched.cancel("b")
    before = frames["b"]
    while sched.has_work():
        for out in sched.step():
            assert out.key != "b", "a cancelled turn went on"
            frames[out.key] += out.kind == "frame"
    assert frames["b"] == before and frames["a"] > before and frames["c"] > 0


def test_text_only_mode_has_no_speech(tiny):
    streamer = OmniStreamer(tiny.model)
    sched = Scheduler(streamer)
    turn = turns(tiny)["a"]
    sched.submit("a", Reply(Conversation(), speak=False, max_text_tokens=20, max_frames=30), turn)
    kinds = []
    while sched.has_work():
        kinds += [o.kind for o in sched.step()]
    assert "frame" not in kinds and kinds.count("token") >= 1 and kinds[-1] == "done"
    assert sched.stats.stage_s["talker"] == 0.0


def test_a_bad_turn_fails_alone(tiny):
    streamer = OmniStreamer(tiny.model)
    sched = Scheduler(streamer)
    good = turns(tiny)["c"]

    def broken():
        raise ValueError("garbage frame")

    sched.submit("bad", Reply(Conversation(), True, 20, 30), broken)
    sched.submit("good", Reply(Conversation(), True, 20, 30), good)
    outs = []
    while sched.has_work():
        outs += sched.step()
    assert [o.kind for o in outs if o.key == "bad"] == ["error"]
    assert any(o.kind == "done" for o in outs if o.key == "good")
