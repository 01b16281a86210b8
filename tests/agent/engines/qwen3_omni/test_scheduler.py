"""The scheduler batches the ready work of many sessions; each session's output is what it gets alone."""

from __future__ import annotations

import numpy as np
import torch

from agent.engines.qwen3_omni.scheduler import Scheduler
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply
from benchmarks.harness import noise
from tests.support import prompter

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


def collect(sched: Scheduler, steps: int | None = None) -> list:
    outs, n = [], 0
    while sched.has_work() and (steps is None or n < steps):
        outs += sched.step()
        n += 1
    return outs


def test_a_held_turn_waits_then_comes_out_exactly_as_if_never_held(tiny):
    streamer = OmniStreamer(tiny.model)
    turn = turns(tiny)["b"]
    plain = Scheduler(streamer)
    plain.submit("k", Reply(Conversation(), True, 20, 30), turn)
    expected = collect(plain)

    sched = Scheduler(streamer)
    reply = Reply(Conversation(), True, 20, 30)
    sched.submit("k", reply, turn, held=True)
    assert collect(sched, 30) == []  # made ahead, nothing out
    assert reply.tokens and 0 < len(reply.frames) <= 2  # the first frames are ready, no more
    assert sched.has_work()
    assert sched.release("k", reply, lambda: turn)
    got = collect(sched)

    def split(outs):
        tokens = [o.value for o in outs if o.kind == "token"]
        frames = [o.value for o in outs if o.kind == "frame"]
        return tokens, frames, outs[-1].kind

    (t1, f1, last1), (t2, f2, last2) = split(expected), split(got)
    assert t1 == t2 and last1 == last2 == "done"
    assert torch.equal(torch.stack(expected[-1].value.reply.frames), torch.stack(reply.frames))  # the same codes
    # the samples within float32 rounding, which the deep conv stack amplifies (as in test_batched_equals_alone):
    # the held run's rows sit elsewhere in the slot pools, and a batch of another shape rounds differently
    a, b = np.concatenate(f1), np.concatenate(f2)
    assert a.shape == b.shape and np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-3
    assert got[-1].value.timings["speculative"] == 1.0


def test_a_held_turn_cancelled_leaves_the_conversation_as_it_was(tiny):
    streamer = OmniStreamer(tiny.model)
    p = prompter(tiny)
    conv = Conversation()
    sched = Scheduler(streamer)
    sched.submit("k", Reply(conv, True, 10, 10), p.turn(text="first", system=SYSTEM))
    collect(sched)
    before = (conv.length, conv.next_pos, conv.role, len(conv.user_embeds), conv.cache.get_seq_length())
    close = p.text_ids("<|im_end|>\n")
    from agent.engines.qwen3_omni.prompt import join

    spec = Reply(conv, True, 10, 10)
    sched.submit("k", spec, join(close, [p.turn(audio=noise(1.0, 9))]), held=True)
    collect(sched, 10)
    assert conv.length > before[0]
    assert sched.cancel("k")
    assert (conv.length, conv.next_pos, conv.role, len(conv.user_embeds), conv.cache.get_seq_length()) == before
    # and the next turn gets what it would have got had the speculation never happened
    second = join(close, [p.turn(text="second")])
    reply = Reply(conv, True, 10, 10)
    sched.submit("k", reply, second)
    collect(sched)
    conv2 = Conversation()
    ref = Scheduler(streamer)
    ref.submit("k", Reply(conv2, True, 10, 10), p.turn(text="first", system=SYSTEM))
    collect(ref)
    ref_reply = Reply(conv2, True, 10, 10)
    ref.submit("k", ref_reply, second)
    collect(ref)
    assert reply.tokens == ref_reply.tokens and torch.equal(torch.stack(reply.frames), torch.stack(ref_reply.frames))


def test_release_after_a_failed_speculation_starts_the_turn_afresh(tiny):
    streamer = OmniStreamer(tiny.model)
    sched = Scheduler(streamer)
    reply = Reply(Conversation(), True, 10, 10)

    def no_speculation():
        raise RuntimeError("no speculation across a context cut")

    sched.submit("k", reply, no_speculation, held=True)
    assert collect(sched, 3) == [] and not sched.has_work()
    assert not sched.release("k", reply, lambda: turns(tiny)["c"])
    kinds = [o.kind for o in collect(sched)]
    assert kinds[0] == "token" and kinds[-1] == "done" and "frame" in kinds
