"""The engine's sessions without the transport: tool calls, text-only mode, a bounded conversation."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList

from agent.engines.base import SpeechFrame, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.qwen3_omni.engine import QwenOmniEngine
from agent.profiles import get_profile
from media.endpoint import EnergyDetector


class Say(LogitsProcessor):
    """Makes the Thinker write `ids` then stop: a random model cannot choose to call a tool by itself."""

    def __init__(self, ids: list[int], eos: int) -> None:
        self.ids: list[int] | None = ids
        self.eos = eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        k = input_ids.shape[1]
        if self.ids is None:
            return scores  # said once; the next reply is the model's own
        if k >= len(self.ids):
            self.ids = None
            forced = torch.full_like(scores, -float("inf"))
            forced[:, self.eos] = 0
            return forced
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.ids[k]] = 0
        return forced


async def turn_events(session, timeout: float = 60.0) -> list:
    """Events up to the next TurnEnd."""
    got = []
    async with asyncio.timeout(timeout):
        async for ev in session.events():
            got.append(ev)
            if isinstance(ev, TurnEnd):
                return got
    raise AssertionError("the event stream ended without TurnEnd")


def engine(tiny, **kw) -> QwenOmniEngine:
    return QwenOmniEngine(loaded=tiny, detector=EnergyDetector, **kw)


async def in_car_turn(tiny, call: str, said: str, max_reply_s: float) -> tuple[list, object]:
    """One typed in-car turn whose Thinker writes `call`; returns the turn's events and the session."""
    eng = engine(tiny, max_reply_s=max_reply_s)
    forced = tiny.tokenizer.encode(call, add_special_tokens=False)
    eng.streamer.thinker_processors = LogitsProcessorList([Say(forced, eng.streamer.eos)])
    session = await eng.open_session(get_profile("in_car"))
    try:
        session.send_text(said)
        return await turn_events(session), session
    finally:
        await session.close()
        await eng.close()


async def test_in_car_tool_call_is_run_validated_and_not_spoken(tiny):
    call = '<tool_call>{"name": "set_window", "arguments": {"window": "front", "position": 100}}</tool_call>'
    first, session = await in_car_turn(tiny, call, "Open the front windows.", 2.0)
    tools = [e for e in first if isinstance(e, ToolCall)]
    assert [t.name for t in tools] == ["set_window"]
    assert tools[0].result["ok"] is True
    windows = tools[0].result["state"]["windows"]
    assert windows["front_left"] == 100 and windows["front_right"] == 100 and windows["rear_left"] == 0
    # the call itself is never spoken; the reply to the tool result is
    cut = first.index(tools[0])
    assert not any(isinstance(e, SpeechFrame) for e in first[:cut])
    assert any(isinstance(e, SpeechFrame) for e in first[cut:])
    assert session.profile.car.state.snapshot()["windows"] == windows


async def test_an_invalid_tool_call_is_refused_and_changes_nothing(tiny):
    from agent.profiles.car import Car

    before = Car().state.snapshot()  # a new car, as the session's starts
    call = '<tool_call>{"name": "set_temperature", "arguments": {"zone": "all", "celsius": 90}}</tool_call>'
    events, session = await in_car_turn(tiny, call, "Set it to ninety degrees.", 1.0)
    tool = next(e for e in events if isinstance(e, ToolCall))
    assert tool.result["ok"] is False and ("90" in tool.result["message"] or "30" in tool.result["message"])
    assert session.profile.car.state.snapshot() == before


async def test_text_only_mode_answers_without_speech(tiny):
    eng = engine(tiny)
    session = await eng.open_session(get_profile("default"))
    session.text_only = True
    try:
        session.send_text("Hello")
        events = await turn_events(session)
    finally:
        await session.close()
        await eng.close()
    assert not any(isinstance(e, SpeechFrame) for e in events)
    final = [e for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final]
    assert len(final) == 1


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
async def test_long_conversation_stays_within_its_context(tiny, graphs):
    """With graphs (uncaptured on the CPU) too: cut turns crop the cache and the static steps follow."""
    eng = engine(tiny, max_context=400, max_reply_tokens=40, max_reply_s=0.5, cuda_graphs=graphs)
    session = await eng.open_session(get_profile("default"))
    lengths = []
    try:
        for i in range(6):
            session.send_text(f"This is message number {i}, tell me something about it please.")
            events = await turn_events(session)
            assert any(isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final for e in events)
            lengths.append(session.context.conv.length)
    finally:
        await session.close()
        await eng.close()
    print(f"cache lengths after each turn: {lengths}; turns cut: {session.context.turns_cut}")
    assert session.context.turns_cut > 0
    assert max(lengths) <= 400
    # the Talker hears exactly the user segments of the kept turns (each turn's input less "<|im_start|>assistant\n")
    heard = sum(len(ids) for ids in session.context.conv.user_ids)
    assert heard == sum(len(t.ids) - 3 for t, _ in session.context.conv.turns)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
async def test_spoken_turns_with_camera_frames(tiny, graphs):
    """Audio through the endpointer plus frames from the aligner: the turn is submitted with its images (held at
    the first pause and let out: with graphs too)."""
    from media.aligner import AlignedChunk, VideoSample

    eng = engine(tiny, max_reply_s=0.5, end_silence_ms=240, cuda_graphs=graphs)
    session = await eng.open_session(get_profile("default"))
    rng = np.random.default_rng(0)
    try:
        for tick in range(40):
            voiced = 3 <= tick < 20
            audio = (rng.standard_normal(1280) * (0.3 if voiced else 0.0)).astype(np.float32)
            image = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
            video = VideoSample(image, tick * 0.08, tick * 0.08, "exact") if tick % 5 == 0 else None
            session.feed(AlignedChunk(tick, audio, video))
        events = await turn_events(session)
    finally:
        await session.close()
        await eng.close()
    user = next(e for e in events if isinstance(e, TranscriptDelta) and e.role == "user")
    assert user.final and user.end_tick is not None and user.speech_end_tick is not None
    turns = session.context.conv.turns
    assert turns and turns[-1][0].image_grid_thw is not None  # the frames went in
    assert any(isinstance(e, SpeechFrame) for e in events)


async def test_interpreting_queues_segments_and_never_cuts_one_off(tiny):
    """translate: the user goes on talking; each segment (ended by a pause) gets its own full reply, in order."""
    eng = engine(tiny, max_reply_s=1.0)
    options = {"source_lang": "en", "target_lang": "es", "end_silence_ms": 400}  # configs/translate.yaml's
    session = await eng.open_session(get_profile("translate"), options)
    rng = np.random.default_rng(1)
    from media.aligner import AlignedChunk

    try:
        for tick in range(60):  # two segments, 0.3 s apart: the second arrives while the first is answered
            voiced = 2 <= tick < 15 or 20 <= tick < 35
            session.feed(AlignedChunk(tick, (rng.standard_normal(1280) * (0.3 if voiced else 0.0)).astype(np.float32)))
        events = await turn_events(session)
        events += await turn_events(session)
    finally:
        await session.close()
        await eng.close()
    ends = [e for e in events if isinstance(e, TurnEnd)]
    assert len(ends) == 2 and not any(e.interrupted for e in ends)
    users = [e for e in events if isinstance(e, TranscriptDelta) and e.role == "user"]
    replies = [e for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final]
    assert [u.extra["segment"] for u in users] == [1, 2] and users[0].extra["lang"] == "en"
    assert [r.extra["segment"] for r in replies] == [1, 2] and replies[0].extra["lang"] == "es"
