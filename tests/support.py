"""What only the tests share: round trips, engines that misbehave, a Realtime client, and the Qwen3-Omni
reference runs (what benchmarks share too: `benchmarks/harness.py`).

Tests import helpers from here and from the harness only, never from each other or from a conftest.
Nothing here compares a time with a threshold: waiting is done by polling a
condition until a generous deadline, so a slow or busy machine takes longer
but judges the same way.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.client import RATE, AgentClient
from agent.engines.base import SpeechFrame
from agent.engines.echo import EchoEngine
from agent.server import AgentServer
from benchmarks.harness import CLICK, noise, quiet_again, round_trip, scrape_metrics, wait_until

# ---------------------------------------------------------------- servers and clients


async def healthy_round_trip(client: AgentClient, timeout: float = 10.0, tries: int = 3) -> float | None:
    """A 10 ms click through an echo session: its round trip, or None if none of `tries` clicks came back. A
    busy machine may make the server drop one late tick (counted; live output never lags), and with it a click."""
    for _ in range(tries):
        rtt = await round_trip(client, CLICK, timeout / tries)
        if rtt is not None:
            return rtt
    return None


async def scrape_until(port: int, pred: Callable[[dict], Any], timeout: float = 30.0) -> dict[tuple[str, tuple], float]:
    """Scrape until `pred` holds (servers count, and workers write their figures, asynchronously); the last
    scrape either way."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        got = await asyncio.to_thread(scrape_metrics, port)
        if pred(got) or loop.time() > end:
            return got
        await asyncio.sleep(0.1)


def session_tasks(session_id: str) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(session_id)]


class SlowEcho(EchoEngine):
    """Echo (turn mode) that waits `delay` seconds before each reply's first frame."""

    delay = 0.0

    async def open_session(self, profile, options=None):
        session = await super().open_session(profile, options)
        events, engine = session.events, self

        async def slow():
            async for ev in events():
                if isinstance(ev, SpeechFrame) and ev.index == 0 and engine.delay:
                    await asyncio.sleep(engine.delay)
                yield ev

        session.events = slow
        return session


def burst() -> np.ndarray:
    t = np.arange(int(0.5 * RATE)) / RATE
    return (0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


class RealtimeClient:
    """A plain WebSocket client of `/v1/realtime` that keeps every event it receives, in order."""

    def __init__(self, server: AgentServer, key: str = "") -> None:
        self.url = f"ws://127.0.0.1:{server.port}/v1/realtime"
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.events: list[dict[str, Any]] = []
        self.ws: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RealtimeClient:
        from websockets.asyncio.client import connect

        self.ws = await connect(self.url, additional_headers=self.headers)
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                self.events.append(json.loads(raw))

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def speak(self, pcm: np.ndarray, rate: int = 24_000, then_silence_s: float = 1.0) -> None:
        """`pcm` (float32 at `rate`) and some silence after it, in 100 ms appends."""
        audio = np.concatenate([pcm, np.zeros(int(then_silence_s * rate), np.float32)])
        step = rate // 10
        for start in range(0, audio.size, step):
            s16 = (np.clip(audio[start : start + step], -1, 1) * 32767).astype("<i2")
            await self.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(s16.tobytes()).decode()})

    async def wait_for(self, pred: Callable[[dict], Any], timeout: float, start: int = 0) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found.extend(e for e in self.events[start:] if pred(e))
            return bool(found)

        if not await wait_until(seen, timeout):
            raise TimeoutError(f"no such event within {timeout} s; got {[e['type'] for e in self.events[start:]]}")
        return found[0]

    def kinds(self, start: int = 0) -> list[str]:
        return [e["type"] for e in self.events[start:]]


def burst_24k(seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * 24_000)) / 24_000
    return (0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


# ---------------------------------------------------------------- spoken inputs (espeak-ng, sox)


def loopback_only() -> bool:
    """True inside a network namespace whose only interface is loopback."""
    # /proc/net/dev follows the network namespace (/sys/class/net does not)
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return [ln.split(":", 1)[0].strip() for ln in lines] == ["lo"]


def best_match(reference: np.ndarray, recording: np.ndarray) -> float:
    """How closely some stretch of `recording` sounds like `reference` (both 16 kHz): the highest Pearson
    correlation of their log-mel spectrograms (10 ms frames) over every alignment. Codecs and resampling
    leave a rendering of the same sounds near 1; other words or another voice score well below."""
    from faster_whisper.feature_extractor import FeatureExtractor

    mel = FeatureExtractor(feature_size=80)
    ref, rec = mel(reference, padding=0), mel(recording, padding=0)
    loud = ref.mean(axis=0) > ref.mean(axis=0).min() + 0.1  # the reference's own silence carries no sound
    ref = ref[:, np.flatnonzero(loud)[0] : np.flatnonzero(loud)[-1] + 1]
    n = ref.shape[1]
    if rec.shape[1] < n:
        return 0.0
    windows = np.lib.stride_tricks.sliding_window_view(rec, n, axis=1)  # [80, lags, n]
    windows = windows.transpose(1, 0, 2).reshape(windows.shape[1], -1)
    a = (ref.ravel() - ref.mean()) / ref.std()
    b = windows - windows.mean(axis=1, keepdims=True)
    b /= b.std(axis=1, keepdims=True) + 1e-9
    return float((b @ a).max() / a.size)


async def ask(client: AgentClient, audio: np.ndarray, timeout: float = 30.0) -> dict:
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
    # the reply's audio may still be on its way: wait until the track has gone quiet again
    await quiet_again(client, frames_before)
    got = np.concatenate(client.received.frames[frames_before:])
    return {
        "user": user["text"],
        "reply": reply["text"],
        "metrics": metrics,
        "audio": got,
        "sent_id": ident,
        "messages": client.messages[start:],
    }


# ---------------------------------------------------------------- Qwen3-Omni: reference runs, inputs, margin


def prompter(loaded):
    from agent.engines.qwen3_omni.prompt import Prompter

    return Prompter(loaded.tokenizer, loaded.feature_extractor, loaded.image_processor)


def image(seed: int, shape=(96, 128, 3)) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) * 255).astype(np.uint8)


def reference(model, turn, eos: int, max_tokens: int, max_frames: int, talker: bool = True):
    """`generate` with greedy decoding; returns text tokens, the codes it decoded ([frames, 16]) and the waveform."""
    import torch

    ids = torch.tensor([turn.ids])
    kw = {"attention_mask": torch.ones_like(ids)}
    if turn.input_features is not None:
        kw.update(input_features=turn.input_features, feature_attention_mask=turn.feature_attention_mask)
    if turn.pixel_values is not None:
        kw.update(pixel_values=turn.pixel_values, image_grid_thw=turn.image_grid_thw)
    captured = []
    decode = model.code2wav.chunked_decode

    def spy(codes, **k):
        captured.append(codes.clone())
        return decode(codes, **k)

    model.code2wav.chunked_decode = spy
    try:
        out = model.generate(
            ids,
            thinker_max_new_tokens=max_tokens,
            thinker_eos_token_id=eos,
            thinker_do_sample=False,
            talker_do_sample=False,
            talker_max_new_tokens=max_frames,
            return_audio=talker,
            **kw,
        )
    finally:
        model.code2wav.chunked_decode = decode
    if not talker:
        seq = out if isinstance(out, torch.Tensor) else out.sequences
        return seq[0, ids.shape[1] :].tolist(), None, None
    seq, wav = out
    return seq[0, ids.shape[1] :].tolist(), captured[0][0].T, wav.reshape(-1).numpy()


def run_alone(streamer, turn, max_tokens: int, max_frames: int, conv=None, speak: bool = True):
    """Drive one reply through the stages in the order the scheduler does; returns the reply and its frames."""
    from agent.engines.qwen3_omni.stream import Conversation, Reply

    reply = Reply(conv or Conversation(), speak=speak, max_text_tokens=max_tokens, max_frames=max_frames)
    streamer.prefill(reply, turn)
    if speak:
        streamer.talker_prefill(reply)
    pcm = []
    while not reply.done:
        progressed = False
        if not reply.text_done and (not speak or reply.speech_done or len(reply.tokens) < reply.talker_step + 4):
            streamer.thinker_step([reply])
            progressed = True
        if speak and not reply.speech_done and len(reply.frames) < len(reply.code0) and streamer.trailing_ready(reply):
            streamer.talker_step([reply])
            progressed = True
        if reply.decoded < len(reply.frames):
            pcm += streamer.decode_frames([reply])
            progressed = True
        assert progressed, "stuck"
    return reply, pcm


def speech_rtf(loaded, frames: int = 32) -> float:
    """Decoding time (Thinker steps, Talker + MTP, Code2Wav) per second of speech for one session, measured here
    and now: the median frame's time over 80 ms, so that a passing hiccup of a shared VM does not decide."""
    import statistics

    import torch
    from transformers.generation.logits_process import SuppressTokensLogitsProcessor

    from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply

    streamer = OmniStreamer(loaded.model)
    streamer.talker_processors.append(SuppressTokensLogitsProcessor([streamer.codec_eos]))  # speak all `frames`
    turn = prompter(loaded).turn(audio=noise(1.0, 1), system="Hi.")
    reply = Reply(Conversation(), True, max_text_tokens=frames + 8, max_frames=frames + 1)
    spent = []
    with torch.no_grad():
        streamer.prefill(reply, turn)
        streamer.talker_prefill(reply)
        while len(reply.frames) < frames and not reply.speech_done:
            t0 = time.perf_counter()
            while not reply.text_done and not streamer.trailing_ready(reply):
                streamer.thinker_step([reply])
            if not reply.text_done:
                streamer.thinker_step([reply])  # the Thinker keeps about one token per frame ahead
            streamer.talker_step([reply])
            streamer.decode_frames([reply])
            spent.append(time.perf_counter() - t0)
    return statistics.median(spent) / 0.08


def require_realtime_margin(loaded, margin: float) -> float:
    """Fail with a clear message, not as a regression, when this machine is too slow to judge a real-time test:
    the test model must speak `margin` times faster than real time here. (The fast tiny model's speech costs
    0.17-0.28 s a second on the slow EPYC kind, mostly PyTorch's per-op overhead, which a smaller model does
    not cut: ask for the margin the test needs, not more.)"""
    import pytest

    # the machine's speed, not a slow spell of a shared VM: up to 5 windows of 32 frames, the best one
    rtf = speech_rtf(loaded)
    for _ in range(4):
        if rtf * margin <= 1.0:
            break
        rtf = min(rtf, speech_rtf(loaded))
    if rtf * margin > 1.0:
        pytest.fail(
            f"this machine is too slow to judge a real-time test: the test model's speech takes {rtf:.2f} s of "
            f"compute per second (a {margin:.0f}x margin needs <= {1 / margin:.2f}); "
            "the failure says nothing about the code under test",
            pytrace=False,
        )
    return rtf
