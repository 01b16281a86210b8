"""The cascade engine behind the real transport: spoken questions, spoken answers."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from agent.client import AgentClient, CameraTrack
from agent.engines.cascade.models import load_models
from tests.agent.cascade_helpers import ask, spoken, to_16k, wer
from tests.agent.conftest import make_config, running, ws_url


@pytest.fixture(scope="module")
def models():
    return load_models()


async def test_spoken_question_gets_spoken_answer(models, tmp_path):
    async with running(make_config("cascade")) as server:
        client = AgentClient(ws_url(server))
        await client.connect()
        await asyncio.sleep(0.5)
        turn = await ask(client, spoken("What time is it?", tmp_path))
        await client.close()
    print(f"user heard: {turn['user']!r}; reply: {turn['reply']!r}; figures: {turn['metrics']}")
    assert wer("what time is it", turn["user"]) <= 0.25
    assert re.fullmatch(r"It's \d{1,2}:\d\d [AP]M\.", turn["reply"])
    # the reply's audio, recognised again, says the reply
    heard = models.recognizer.transcribe(to_16k(turn["audio"]))
    print(f"the returned audio says: {heard!r}")
    assert "it's" in heard.lower() or "it is" in heard.lower()
    assert re.search(r"\d", heard)
    assert turn["metrics"]["first_audio_ms"] is not None
