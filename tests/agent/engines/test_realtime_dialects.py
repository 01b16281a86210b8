"""The `realtime` engine against each kind of server, over the real WebRTC transport.

Each scripted server below follows its documented event flow (the `Dialect` table in
agent/wire/realtime.py names the documents): OpenAI's Realtime API with server VAD
(openai/types/realtime/ in the `openai` package); vLLM-Omni's OpenAI-like flow, where the
client commits and asks for a response (docs/serving/realtime_openai_duplex_api.md); its older
flow, commit final=false ... final=true over 16 kHz input, `transcription.*` text and
`response.audio.*` audio carrying `sample_rate_hz` (docs/serving/realtime_api.md); and NVIDIA
Dynamo's omni worker, 16 kHz, a bare commit per utterance, no cancel
(components/src/dynamo/vllm/omni/realtime_handler.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

import numpy as np
import pytest
from websockets.asyncio.server import serve

from agent.client import AgentClient
from agent.engines.base import SpeechFrame, TextDelta, TurnEnd
from agent.engines.realtime import RealtimeEngine
from agent.profiles import get_profile
from benchmarks.harness import (
    REALTIME_REPLY,
    TONE_HZ,
    ScriptedRealtime,
    make_config,
    media_flowing,
    quiet_again,
    running,
    spoken,
    to_16k,
    ws_url,
)
from tests.support import ask

MODEL = "Qwen/Qwen3-Omni-30B-A3B-Instruct"


@contextlib.asynccontextmanager
async def connected(far: ScriptedRealtime, dialect: str, profile: str = "default"):
    """A page's client, through our server's realtime engine in `dialect`, to the scripted `far` server."""
    async with serve(far.handler, "127.0.0.1", 0) as srv:
        cfg = make_config("realtime")
        cfg.profile = profile
        cfg.engine.options = {"url": f"ws://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1/realtime",
                              "model": MODEL, "dialect": dialect}  # fmt: skip
        async with running(cfg) as near:
            client = AgentClient(ws_url(near), profile=profile)
            await client.connect()
            await media_flowing(client)
            try:
                yield client
            finally:
                await client.close()


def dominant_hz(pcm: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(pcm.size)))
    return float(np.fft.rfftfreq(pcm.size, 1 / rate)[np.argmax(spectrum)])


DIALECTS = ["openai", "vllm-omni", "vllm-omni-turn", "dynamo"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_spoken_turn_is_answered_with_the_served_text_and_audio(dialect, tmp_path):
    far = ScriptedRealtime(dialect, out_rate=16_000 if dialect == "vllm-omni-turn" else 24_000)
    async with connected(far, dialect) as client:
        turn = await ask(client, spoken("What time is it?", tmp_path))
    assert turn["reply"] == "".join(REALTIME_REPLY)
    loud = turn["audio"][np.abs(turn["audio"]) > 0.05]
    assert loud.size > 0.5 * 48_000  # most of the second of tone came back
    assert abs(dominant_hz(turn["audio"], 48_000) - TONE_HZ) < 10  # at its own rate, whatever the server's
    update = far.events[0]
    assert update["type"] == "session.update"
    kinds = far.kinds()
    appended = [np.frombuffer(base64.b64decode(e["audio"]), "<i2") for e in far.events if "audio" in e]
    if dialect == "openai":  # the server's VAD ended the turn: audio streamed all along, no commit
        assert "input_audio_buffer.commit" not in kinds and update["session"]["audio"]["input"]["turn_detection"]
    elif dialect == "vllm-omni":  # our end of turn: commit, then ask for the response
        i = kinds.index("input_audio_buffer.commit")
        assert kinds[i + 1] == "response.create" and update["session"]["instructions"]
        assert update["session"]["audio"]["input"]["turn_detection"] is None
    elif dialect == "vllm-omni-turn":  # the generation started at the first pause, ended at the end
        commits = [e.get("final") for e in far.events if e["type"] == "input_audio_buffer.commit"]
        assert commits == [False, True] and update == {"type": "session.update", "model": MODEL}
        first = kinds.index("input_audio_buffer.commit")
        assert "input_audio_buffer.append" in kinds[first:]  # audio after the start, over the stream
    else:
        assert [e for e in far.events if e["type"] == "input_audio_buffer.commit"] == [
            {"type": "input_audio_buffer.commit"}
        ]
    if dialect in ("vllm-omni-turn", "dynamo"):  # 16 kHz, and only the turn's audio: about the spoken clip
        heard_s = sum(a.size for a in appended) / 16_000
        clip_s = to_16k(spoken("What time is it?", tmp_path)).size / 16_000
        assert clip_s * 0.5 < heard_s < clip_s + 1.5, (heard_s, clip_s)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_barge_in(dialect, tmp_path):
    far = ScriptedRealtime(dialect)
    far.reply_s = 8.0  # a long answer, streamed at twice real time
    async with connected(far, dialect) as client:
        client.mic.play(spoken("Tell me a long story.", tmp_path))
        await client.wait_for(lambda m: m.get("state") == "speaking", 30)
        await asyncio.sleep(0.5)
        await client.send({"type": "interrupt"})
        cut = await client.wait_for(lambda m: m["type"] == "metrics", 10)
        assert cut["interrupted"] is True
        since = len(client.received.frames)
        await quiet_again(client, max(0, since - 5))
        await asyncio.sleep(1.0)  # the far side may still be sending: none of it may play
        after = client.received.frames[since + 15 :]
        assert after and max(np.abs(f).max() for f in after) < 0.01, "speech went on after the interrupt"
    kinds = far.kinds()
    if dialect in ("openai", "vllm-omni"):
        truncate = next(e for e in far.events if e["type"] == "conversation.item.truncate")
        assert "response.cancel" in kinds and truncate["item_id"] == "item_1"
        # what was played: at least the first frame (half a second passed), never more than the whole reply
        assert 80 <= truncate["audio_end_ms"] <= 8000
    else:  # no cancel in these flows: the rest is dropped on our side
        assert "response.cancel" not in kinds and "conversation.item.truncate" not in kinds


@pytest.mark.parametrize("dialect", ["openai", "vllm-omni"])
async def test_a_tool_round_trip(dialect, tmp_path):
    far = ScriptedRealtime(dialect, tool=True)
    async with connected(far, dialect, profile="in_car") as client:
        turn = await ask(client, spoken("Open the front windows.", tmp_path))
    tools = [m for m in turn["messages"] if m["type"] == "tool" and m["name"] == "set_window"]
    assert tools and tools[0]["result"]["ok"] and tools[0]["result"]["state"]["windows"]["front_left"] == 100
    assert turn["reply"] == "".join(REALTIME_REPLY) and np.abs(turn["audio"]).max() > 0.05
    update = far.events[0]
    assert {t["name"] for t in update["session"]["tools"]} >= {"set_window", "set_temperature"}
    output = next(e for e in far.events if e.get("item", {}).get("type") == "function_call_output")
    assert output["item"]["call_id"] == "call_1" and json.loads(output["item"]["output"])["ok"] is True


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_server_error_is_shown_once_and_the_session_goes_on(dialect, tmp_path):
    far = ScriptedRealtime(dialect, error=True)
    async with connected(far, dialect) as client:
        client.mic.play(spoken("What time is it?", tmp_path))
        err = await client.wait_for(lambda m: m["type"] == "error", 30)
        assert "the model failed" in err["message"]
        await client.wait_for(lambda m: m.get("state") == "listening", 10, client.messages.index(err))
        await asyncio.sleep(1.0)
        assert sum(m["type"] == "error" for m in client.messages) == 1
        far.error = False
        start = len(client.messages)
        turn = await ask(client, spoken("What time is it?", tmp_path))
        assert turn["reply"] == "".join(REALTIME_REPLY)
        assert not any(m["type"] == "error" for m in client.messages[start:])


async def test_text_only_turns_are_not_spoken():
    """The server's overload level 2 sets text_only: the reply's text still comes, its audio is not played."""
    far = ScriptedRealtime("vllm-omni")
    async with serve(far.handler, "127.0.0.1", 0) as srv:
        url = f"ws://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1/realtime"
        engine = RealtimeEngine(url=url, dialect="vllm-omni", detector=lambda: None)
        session = await engine.open_session(get_profile("default"))

        async def turn():
            got = []
            async for ev in session.events():
                got.append(ev)
                if isinstance(ev, TurnEnd):
                    return got

        session.send_text("What time is it?")
        spoken_turn = await asyncio.wait_for(turn(), 20)
        session.text_only = True
        session.send_text("What time is it?")
        quiet = await asyncio.wait_for(turn(), 20)
        await session.close()
    assert any(isinstance(e, SpeechFrame) for e in spoken_turn)
    assert any(isinstance(e, TextDelta) for e in quiet) and not any(isinstance(e, SpeechFrame) for e in quiet)
