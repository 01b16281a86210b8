"""The qwen3-omni engine (the fast tiny random model, CPU) behind the real transport: an aiortc client speaks,
the engine answers with continuous 80 ms frames; typed text and barge-in on the same path. The real-time tests
first measure that the model speaks fast enough here for what they judge (support.require_realtime_margin): 3x
for continuous frames while the client, server and model share the cores, 2x for speech to run ahead of
playout."""

from __future__ import annotations

import numpy as np
import pytest
from transformers.generation.logits_process import SuppressTokensLogitsProcessor

from agent.client import AgentClient, CameraTrack
from agent.engines.qwen3_omni.engine import QwenOmniEngine
from benchmarks.harness import make_config, media_flowing, quiet_again, running, spoken, wait_until, ws_url
from tests.support import require_realtime_margin


def serving(loaded, **engine):
    eng = QwenOmniEngine(loaded=loaded, max_reply_s=engine.pop("max_reply_s", 3.0), **engine)
    return running(make_config("qwen3-omni"), eng)


def session_of(server):
    return next(iter(server.sessions.values())).pump


async def test_spoken_turn_gets_continuous_speech_frames(tiny_fast, tmp_path):
    rtf = require_realtime_margin(tiny_fast, 3.0)  # continuity is judged where the model has 3x to spare
    async with serving(tiny_fast) as server:
        client = AgentClient(ws_url(server), video=CameraTrack())
        await client.connect()
        await media_flowing(client)
        start, frames_before = len(client.messages), len(client.received.frames)
        client.mic.play(spoken("Hello, can you hear me?", tmp_path))
        user = await client.wait_for(lambda m: m["type"] == "transcript" and m["role"] == "user", 20, start)
        reply = await client.wait_for(
            lambda m: m["type"] == "transcript" and m["role"] == "assistant" and m["final"], 60, start
        )
        metrics = await client.wait_for(lambda m: m["type"] == "metrics", 60, start)
        await quiet_again(client, frames_before)
        stats = session_of(server).framer.stats
        await client.close()
    print(f"speech RTF {rtf:.2f}; user: {user['text']!r}; reply: {reply['text']!r}; metrics: {metrics}")
    assert "s of speech" in user["text"]
    assert metrics["first_audio_ms"] is not None and not metrics["interrupted"]
    assert stats.speech_frames >= 20 and stats.underruns == 0  # the 80 ms frames kept up with playout
    audio = np.concatenate(client.received.frames[frames_before:])
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    assert loud.size, "no speech came back"
    # from the first to the last audible sample, no gap over 100 ms: continuous frames
    gaps = np.diff(loud) / 48_000
    assert gaps.max() < 0.1, f"gap of {gaps.max() * 1000:.0f} ms in the reply"
    assert (loud[-1] - loud[0]) / 48_000 >= 0.8


async def test_typed_text_and_barge_in(tiny_fast, tmp_path):
    require_realtime_margin(tiny_fast, 2.0)  # speech must run ahead of playout for there to be something to flush
    async with serving(tiny_fast, max_reply_s=20.0, end_silence_ms=320) as server:
        # the random Talker would end its speech after about a second; here it speaks up to its 20 s limit
        streamer = server.engine.streamer
        streamer.talker_processors.append(SuppressTokensLogitsProcessor([streamer.codec_eos]))
        client = AgentClient(ws_url(server))
        # no loudspeaker, and it says so: this early in the first reply the server's canceller would still
        # take the barge-in for an echo it has not ruled out (media/echo_cancel.py)
        client.echo_cancelled = True
        await client.connect()
        await media_flowing(client)
        start = len(client.messages)
        await client.send({"type": "text", "text": "Tell me a long story."})
        await client.wait_for(lambda m: m.get("state") == "speaking", 30, start)
        framer = session_of(server).framer
        assert await wait_until(lambda: framer.backlog_ms > 0, 20), "no speech was ever queued"
        client.mic.play(spoken("Stop, please.", tmp_path))
        cut = await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
        flushed = session_of(server).framer.stats.flushed_samples
        nxt = await client.wait_for(lambda m: m["type"] == "metrics" and not m["interrupted"], 60, start)
        await client.close()
    assert cut["interrupted"] is True and flushed > 0
    assert nxt["turn"] > cut["turn"]


@pytest.mark.parametrize("profile", ["in_car", "translate"])
async def test_profiles_open_and_answer(tiny_fast, profile):
    async with serving(tiny_fast) as server:
        client = AgentClient(ws_url(server), profile=profile)
        answer = await client.connect()
        assert answer["engine"] == "qwen3-omni" and answer["profile"] == profile
        start = len(client.messages)
        await client.send({"type": "text", "text": "Open the front window."})
        await client.wait_for(lambda m: m["type"] == "metrics", 60, start)
        await client.close()
