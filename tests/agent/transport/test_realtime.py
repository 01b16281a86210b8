"""`/v1/realtime` with real clients: our own `realtime` engine (two hops) and the official `openai` SDK."""

from __future__ import annotations

import asyncio
import base64
import json
import re

import numpy as np
import pytest

from agent.client import AgentClient
from agent.engines.cascade.models import load_models
from benchmarks.harness import make_config, media_flowing, running, spoken, to_16k, wait_until, ws_url
from tests.support import ask


@pytest.fixture(scope="module")
def models():
    return load_models()


async def test_spoken_question_through_two_hops(models, tmp_path):
    async with running(make_config("cascade")) as far:
        near_cfg = make_config("realtime")
        near_cfg.engine.options = {"url": f"ws://127.0.0.1:{far.port}/v1/realtime"}
        async with running(near_cfg) as near:
            client = AgentClient(ws_url(near))
            await client.connect()
            assert client.answer["engine"] == "realtime" and far.realtime_live == 1
            await media_flowing(client)
            turn = await ask(client, spoken("What time is it?", tmp_path))
            assert re.fullmatch(r"It's \d{1,2}:\d\d [AP]M\.", turn["reply"]), turn["reply"]
            assert "time" in turn["user"].lower()
            assert np.abs(turn["audio"]).max() > 0.05  # spoken, through both hops
            # interruption crosses both hops: talk over a long answer
            start = len(client.messages)
            client.mic.play(spoken("What can you do?", tmp_path))
            await client.wait_for(lambda m: m.get("state") == "speaking", 30, start)
            await client.send({"type": "interrupt"})
            cut = await client.wait_for(lambda m: m["type"] == "metrics", 10, start)
            assert cut["interrupted"] is True
            await client.close()
            assert await wait_until(lambda: far.realtime_live == 0, 10)


async def test_official_openai_sdk_holds_a_conversation(models, tmp_path):
    from openai import AsyncOpenAI

    question = spoken("What time is it?", tmp_path, rate=24_000)
    question = np.concatenate([question, np.zeros(24_000, np.float32)])  # then a second of silence
    async with running(make_config("cascade")) as server:
        sdk = AsyncOpenAI(api_key="unused-locally", base_url=f"http://127.0.0.1:{server.port}/v1")
        async with sdk.realtime.connect(model="cascade") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})
            for start in range(0, question.size, 2400):  # 100 ms appends, paced like a microphone
                pcm = (np.clip(question[start : start + 2400], -1, 1) * 32767).astype("<i2")
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm.tobytes()).decode())
                await asyncio.sleep(0.1)
            kinds, heard, said, audio = [], "", "", []
            async with asyncio.timeout(20):
                async for event in conn:
                    kinds.append(event.type)
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        heard = event.transcript
                    elif event.type == "response.output_audio_transcript.done":
                        said = event.transcript
                    elif event.type == "response.output_audio.delta":
                        audio.append(np.frombuffer(base64.b64decode(event.delta), "<i2"))
                    elif event.type == "response.done":
                        break
    assert kinds[0] == "session.created" and "session.updated" in kinds
    assert "time" in heard.lower(), heard
    assert re.fullmatch(r"It's \d{1,2}:\d\d [AP]M\.", said), said
    reply = np.concatenate(audio).astype(np.float32) / 32768
    assert reply.size > 24_000 * 0.5 and np.abs(reply).max() > 0.05
    again = models.recognizer.transcribe(to_16k(reply, 24_000))
    assert "it's" in again.lower() or "it is" in again.lower(), again


async def test_refused_realtime_clients_get_an_error_event_and_are_counted():
    from websockets.asyncio.client import connect

    cfg = make_config("echo", "stream", token="s3cret")
    async with running(cfg) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/realtime"
        async with connect(url) as ws:  # no key
            event = json.loads(await ws.recv())
            await ws.wait_closed()
        assert event["type"] == "error" and event["error"]["code"] == "unauthorized"
        assert ws.close_code == 1008
        server.config.server.max_sessions = 0
        async with connect(url, additional_headers={"Authorization": "Bearer s3cret"}) as ws:
            event = json.loads(await ws.recv())
            await ws.wait_closed()
        assert event["error"]["code"] == "busy" and ws.close_code == 1013
        metrics = server.metrics.render().decode()
    assert 'omni_sessions_refused_total{reason="token"} 1.0' in metrics
    assert 'omni_sessions_refused_total{reason="limit"} 1.0' in metrics
