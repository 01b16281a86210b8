"""Shared by the cascade tests: spoken questions in, spoken answers out."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np

from agent.client import AgentClient
from media.pcm import StreamResampler
from tests.fixtures import read_wav, speech_wav


def spoken(text: str, tmp: Path, rate: int = 48_000) -> np.ndarray:
    name = re.sub(r"\W+", "_", text)[:40]
    audio, sr = read_wav(speech_wav(text, tmp / f"{name}.wav", rate=rate, pad_before=0.2, pad_after=0.1))
    assert sr == rate
    return audio


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def wer(ref: str, hyp: str) -> float:
    r, h = words(ref), words(hyp)
    d = np.arange(len(h) + 1)
    for i, rw in enumerate(r, 1):
        prev, d[0] = d.copy(), i
        for j, hw in enumerate(h, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (rw != hw))
    return d[len(h)] / max(1, len(r))


def to_16k(audio: np.ndarray, rate: int = 48_000) -> np.ndarray:
    rs = StreamResampler(rate, 16_000, quality="HQ")
    return np.concatenate([rs.process(audio.astype(np.float32)), rs.process(np.zeros(0, np.float32), last=True)])


async def ask(client: AgentClient, audio: np.ndarray, timeout: float = 20.0) -> dict:
    """Speak, and wait for the whole answer; returns the turn's transcripts, figures and audio."""
    start = len(client.messages)
    frames_before = len(client.received.frames)
    ident = client.mic.play(audio)
    user = await client.wait_for(
        lambda m: m["type"] == "transcript" and m["role"] == "user" and m["final"], timeout, start
    )
    reply = await client.wait_for(
        lambda m: m["type"] == "transcript" and m["role"] == "assistant" and m["final"], timeout, start
    )
    metrics = await client.wait_for(lambda m: m["type"] == "metrics", timeout, start)
    await asyncio.sleep(0.2)
    got = np.concatenate(client.received.frames[frames_before:])
    return {
        "user": user["text"],
        "reply": reply["text"],
        "metrics": metrics,
        "audio": got,
        "sent_id": ident,
        "messages": client.messages[start:],
    }
