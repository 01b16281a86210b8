"""The cascade's replies from an OpenAI-compatible chat model: a local scripted server (`ChatServer` in
benchmarks/harness.py) streams chat-completion chunks the way the API does; the real offline speech models."""

from __future__ import annotations

import asyncio
import contextlib
import json

import numpy as np
import pytest

from agent.client import AgentClient
from agent.config import LlmConfig
from agent.engines.base import Error, SpeechFrame, TextDelta, ToolCall, TranscriptDelta, TurnEnd
from agent.engines.cascade import CascadeEngine
from agent.engines.cascade.llm import APOLOGY
from agent.engines.cascade.models import load_models
from agent.profiles import get_profile
from benchmarks.harness import (
    ChatServer,
    make_config,
    media_flowing,
    running,
    scrape_metrics,
    spoken,
    to_16k,
    wait_until,
    ws_url,
)
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK
from tests.support import ask


@pytest.fixture(scope="module")
def models():
    return load_models()


def llm(server: ChatServer | None, **kw) -> LlmConfig:
    return LlmConfig(url=server.url if server else "http://127.0.0.1:9/v1", model="local", **kw)


@contextlib.asynccontextmanager
async def cascade(models, chat: ChatServer | None, judged: bool = True, **settings):
    """A cascade engine whose replies come from `chat` (None: a URL where nothing listens); both closed after.
    `judged=False`: no verdict at a pause, so every pause waits the full silence."""
    engine = CascadeEngine(models=models, llm=llm(chat, **settings), smart_turn=judged, turn_words=judged)
    try:
        yield engine
    finally:
        await engine.close()
        if chat is not None:
            chat.close()


async def turn_of(session, timeout: float = 30.0) -> list:
    """Events up to the turn's end."""
    out = []

    async def take():
        async for ev in session.events():
            out.append(ev)
            if isinstance(ev, TurnEnd):
                return

    await asyncio.wait_for(take(), timeout)
    return out


def said(events) -> str:
    return next(e.text for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final)


def speech(events) -> int:
    return sum(e.pcm.size for e in events if isinstance(e, SpeechFrame))


async def test_a_spoken_question_is_answered_aloud_with_the_served_text(models, tmp_path):
    served = ["Paris is the capital ", "of France. It lies ", "on the Seine."]
    chat = ChatServer(lambda req: served, first_token_s=0.1)
    cfg = make_config("cascade")
    cfg.engine.llm = llm(chat)
    try:
        async with running(cfg) as server:
            client = AgentClient(ws_url(server))
            await client.connect()
            await media_flowing(client)
            turn = await ask(client, spoken("What is the capital of France?", tmp_path))
            await client.close()
            metrics = await asyncio.to_thread(scrape_metrics, server.port)
    finally:
        chat.close()
    print(f"heard {turn['user']!r}; said {turn['reply']!r}; figures {turn['metrics']}")
    assert turn["reply"] == "Paris is the capital of France. It lies on the Seine."
    request = chat.requests[-1]
    assert "capital" in request["messages"][-1]["content"].lower() and request["stream"] is True
    assert "spoken aloud" in request["messages"][0]["content"] and "camera is off" in request["messages"][0]["content"]
    heard = models.recognizer.transcribe(to_16k(turn["audio"]))
    print(f"the returned audio says: {heard!r}")
    assert "paris" in heard.lower() and "capital" in heard.lower()  # both sentences: "lies on" too
    assert "lies on" in heard.lower()
    figures = turn["metrics"]
    assert figures["llm_first_token_ms"] >= 100 and figures["llm_first_sentence_ms"] >= figures["llm_first_token_ms"]
    assert metrics[("omni_turn_latency_seconds_count", (("stage", "llm_first_sentence"),))] >= 1


async def test_a_car_command_calls_a_tool_and_the_car_moves(models):
    def script(req):
        if req["messages"][-1]["role"] == "tool":
            return ["The front windows are open now."]
        return [{"name": "set_window", "arguments": json.dumps({"window": "front", "position": 100})}]

    chat = ChatServer(script)
    async with cascade(models, chat) as engine:
        session = await engine.open_session(get_profile("in_car"))
        session.send_text("Open the front windows.")
        events = await turn_of(session)
        calls = [e for e in events if isinstance(e, ToolCall)]
        assert calls[0].name == "get_vehicle_state"  # the panel's first picture
        (call,) = calls[1:]
        assert call.name == "set_window" and call.result["ok"]
        assert call.result["state"]["windows"]["front_left"] == 100
        assert said(events) == "The front windows are open now." and speech(events) > 0
        first, second = chat.requests
        assert {t["function"]["name"] for t in first["tools"]} >= {"set_window", "set_temperature"}
        tool_msg = second["messages"][-1]
        assert json.loads(tool_msg["content"])["ok"] is True and tool_msg["tool_call_id"] == "call_0"
        await session.close()


async def test_a_refused_call_changes_nothing(models):
    def script(req):
        if req["messages"][-1]["role"] == "tool":
            return ["I can't set it that hot."]
        return [{"name": "set_temperature", "arguments": json.dumps({"zone": "all", "celsius": 45})}]

    chat = ChatServer(script)
    async with cascade(models, chat) as engine:
        session = await engine.open_session(get_profile("in_car"))
        before = session.policy.car.state.snapshot()
        session.send_text("Set the temperature to 45 degrees.")
        events = await turn_of(session)
        (call,) = [e for e in events if isinstance(e, ToolCall) and e.name == "set_temperature"]
        assert call.result["ok"] is False and session.policy.car.state.snapshot() == before
        assert json.loads(chat.requests[-1]["messages"][-1]["content"])["ok"] is False
        assert said(events) == "I can't set it that hot."
        await session.close()


async def test_barge_in_closes_the_request(models):
    chat = ChatServer(lambda req: ["Let me think about that. ", ("sleep", 20), "Something stale."])
    async with cascade(models, chat) as engine:
        session = await engine.open_session(get_profile("default"))
        session.send_text("Tell me a long story.")
        got = []

        async def until_speech():
            async for ev in session.events():
                got.append(ev)
                if isinstance(ev, SpeechFrame):
                    return

        await asyncio.wait_for(until_speech(), 30)
        session.interrupt()
        assert await wait_until(lambda: chat.closed_early == 1, 10), "the server never saw the stream closed"
        await session.close()
        assert not any(isinstance(e, TextDelta) and "stale" in e.text for e in got)


async def test_going_on_after_a_pause_closes_the_request_made_at_the_pause(models, tmp_path):
    """The request starts at the first pause (speculation); the user goes on, so it is closed unanswered."""
    chat = ChatServer(lambda req: ["Too early."], first_token_s=30)
    async with cascade(models, chat, judged=False) as engine:  # a verdict might end the turn at the pause
        session = await engine.open_session(get_profile("default"), {"end_silence_ms": 4000})
        words = to_16k(spoken("What is the capital of France", tmp_path))
        gap = np.zeros(int(2.5 * 16_000), np.float32)  # a pause (160 ms) that does not end the turn (4 s)
        audio = np.concatenate([words, gap, words])
        ticks = audio.size // INPUT_SAMPLES_PER_TICK
        in_gap = (words.size / 16_000 + 2.0, (words.size + gap.size) / 16_000)
        for t in range(ticks):  # in real time: the speculation runs while the user is silent
            session.feed(AlignedChunk(t, audio[t * INPUT_SAMPLES_PER_TICK : (t + 1) * INPUT_SAMPLES_PER_TICK]))
            await asyncio.sleep(0.08)
            if in_gap[0] < t * 0.08 < in_gap[1]:
                assert len(chat.requests) == 1, "no request was made at the pause"
        assert await wait_until(lambda: chat.closed_early >= 1, 10), "the request made at the pause stayed open"
        await session.close()


@pytest.mark.parametrize(
    "case, why",
    [
        ("unreachable", "cannot be reached"),
        ("key", "refused the key (401)"),
        ("timeout", "gave nothing for 1 s"),
        ("garbage", "made no sense"),
    ],
)
async def test_a_failing_model_is_said_once_with_a_spoken_apology_and_the_session_goes_on(models, case, why):
    steps = {"timeout": [("silence", 3)], "garbage": ["Hello", ("garbage",)]}.get(case, ["Fine."])
    chat = None if case == "unreachable" else ChatServer(lambda req: steps, key="right" if case == "key" else "")
    async with cascade(models, chat, key="wrong" if case == "key" else "", timeout_s=1.0, retries=0) as engine:
        session = await engine.open_session(get_profile("default"))
        for _ in range(2):  # the session goes on: a second turn is answered the same way
            session.send_text("Hello?")
            events = await turn_of(session)
            errors = [e for e in events if isinstance(e, Error)]
            assert len(errors) == 1 and errors[0].code == "llm_failed" and why in errors[0].message, errors
            assert said(events) == APOLOGY and speech(events) > 0
        await session.close()


async def test_translation_by_the_model_in_a_voice_of_its_language(models):
    chat = ChatServer(lambda req: ["Bonjour à tous."])
    async with cascade(models, chat) as engine:
        spoken_fr = await engine.open_session(get_profile("translate"), {"source_lang": "en", "target_lang": "fr"})
        spoken_fr.send_text("Hello everyone.")
        events = await turn_of(spoken_fr)
        final = next(e for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final)
        assert final.text == "Bonjour à tous." and final.extra["lang"] == "fr" and speech(events) > 0
        assert "French" in chat.requests[-1]["messages"][0]["content"]
        captions = await engine.open_session(get_profile("translate"), {"source_lang": "en", "target_lang": "xx"})
        captions.send_text("Hello everyone.")
        events = await turn_of(captions)
        final = next(e for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final)
        assert "captions only" in final.extra["notice"] and speech(events) == 0
        for s in (spoken_fr, captions):
            await s.close()


async def test_the_history_sent_stays_within_its_bound(models):
    chat = ChatServer(lambda req: [f"Reply number {len(req['messages'])}."])
    async with cascade(models, chat, history_chars=120) as engine:
        session = await engine.open_session(get_profile("default"))
        for i in range(6):
            session.send_text(f"This is message {i}, which is a little long.")
            await turn_of(session)
        sizes = [sum(len(m["content"]) for m in r["messages"][1:-1]) for r in chat.requests]
        assert max(sizes) <= 120 and len(chat.requests[-1]["messages"]) > 2  # some history, never too much
        await session.close()


async def test_an_interpreters_segments_are_said_one_after_another(models):
    """Interpreting lets no segment cut another: the second waits until the first has been said."""
    chat = ChatServer(
        lambda req: ["Uno. ", ("sleep", 0.5), "Dos."] if "one" in req["messages"][-1]["content"].lower() else ["Tres."]
    )
    async with cascade(models, chat) as engine:
        session = await engine.open_session(get_profile("translate"), {"source_lang": "en", "target_lang": "es"})
        session.send_text("One, two.")
        session.send_text("Three.")
        events = (await turn_of(session)) + (await turn_of(session))
        users = [i for i, e in enumerate(events) if isinstance(e, TranscriptDelta) and e.role == "user"]
        first_end = next(i for i, e in enumerate(events) if isinstance(e, TurnEnd))
        assert first_end < users[1]  # nothing of the second segment before the first is over
        finals = [e.text for e in events if isinstance(e, TranscriptDelta) and e.role == "assistant" and e.final]
        assert finals == ["Uno. Dos.", "Tres."]
        await session.close()
