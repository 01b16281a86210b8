"""What tests and benchmarks share: servers on loopback, clients, scripted far servers (a chat model, a
Realtime server), spoken inputs (espeak-ng, sox), rooms, noise and word errors.

Nothing here compares a time with a threshold: waiting is done by polling a condition until a generous
deadline, so a slow or busy machine takes longer but judges the same way.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agent.client import RATE, AgentClient
from agent.config import Config
from agent.server import AgentServer
from agent.server.process import tune_for_real_time
from media.pcm import StreamResampler


@contextlib.contextmanager
def turn_server(tmp: Path, addresses: list[str], secret: str, port: int = 3478) -> Iterator[subprocess.Popen]:
    """Debian's coturn on `addresses` (listening and relaying), taking credentials minted from `secret` (its
    use-auth-secret, the TURN REST scheme); ready when yielded."""
    turnserver = shutil.which("turnserver")
    if turnserver is None:
        raise RuntimeError("Debian's coturn is not installed; scripts/setup.sh --test installs it")
    cmd = [turnserver, "-n", "--no-cli", "--no-tls", "--no-dtls", "--simple-log", "--log-file", "stdout",
           "--listening-port", str(port), "--use-auth-secret", f"--static-auth-secret={secret}", "--realm",
           "omni.test", "--min-port", "49152", "--max-port", "49400", "--pidfile", str(tmp / "turn.pid"),
           "--no-software-attribute"]  # fmt: skip
    for address in addresses:
        cmd += ["--listening-ip", address, "--relay-ip", address]
    if any(a.startswith("127.") for a in addresses):
        cmd.append("--allow-loopback-peers")  # both peers' relays on this machine's loopback
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(200):  # bounded: until it answers on its UDP port
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            probe.settimeout(0.05)
            try:  # a STUN binding request: 20 bytes of header, magic cookie, a transaction id
                probe.sendto(bytes.fromhex("000100002112a442") + os.urandom(12), (addresses[0], port))
                if probe.recv(1500):
                    break
            except OSError:
                time.sleep(0.02)
            finally:
                probe.close()
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def make_config(engine: str = "echo", mode: str = "stream", **server: Any) -> Config:
    cfg = Config()
    cfg.engine.name = engine
    cfg.engine.mode = mode
    cfg.engine.end_silence_ms = 480
    cfg.server.port = 0
    cfg.ice.host_addresses = ["127.0.0.1"]
    cfg.server.transcripts_dir = ""  # tests that want transcripts set a folder
    for k, v in server.items():
        setattr(cfg.server, k, v)
    return cfg


@contextlib.asynccontextmanager
async def running(cfg: Config, engine: Any = None):
    server = AgentServer(cfg, engine=engine)
    await server.start()
    tune_for_real_time()  # as the CLI's serve does (the host addresses: conftest.py)
    try:
        yield server
    finally:
        await server.close()


def ws_url(server: AgentServer) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"


async def wait_until(pred: Callable[[], Any], timeout: float, every: float = 0.02) -> bool:
    """Poll `pred` until it holds or `timeout` passes; returns its last value as a bool."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if pred():
            return True
        await asyncio.sleep(every)
    return bool(pred())


async def media_flowing(client: AgentClient, timeout: float = 20.0) -> None:
    """Wait until the server's audio track reaches the client (ICE and DTLS are up), instead of a fixed sleep."""
    if not await wait_until(lambda: len(client.received.frames) >= 5, timeout):
        raise TimeoutError(f"no audio from the server within {timeout} s of connecting")


async def round_trip(client: AgentClient, pcm: np.ndarray, timeout: float = 10.0) -> float | None:
    """Play `pcm` and wait for a loud sample to come back: the round trip (s), or None if none came in time."""
    ident = client.mic.play(pcm)
    found: list[float] = []

    def back() -> bool:
        t0 = client.mic.sent_at.get(ident)
        if t0 is None:
            return False
        t1 = client.received.first_loud_after(t0)
        if t1 is not None:
            found.append(t1 - t0)
        return t1 is not None

    await wait_until(back, timeout)
    return found[-1] if found else None


CLICK = (0.8 * np.sin(np.arange(480) * 2 * np.pi * 1000 / RATE)).astype(np.float32)


def stats(values_ms: list[float]) -> dict[str, float]:
    """Median and p95 (ms) of `values_ms`, and how many there were."""
    a = np.array(values_ms)
    return {"median_ms": float(np.median(a)), "p95_ms": float(np.percentile(a, 95)), "n": int(a.size)}


def write_result(path: Path, result: dict) -> None:
    """A benchmark's figures as JSON at `path` (its folder made), and where they went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


def scrape_metrics(port: int) -> dict[tuple[str, tuple], float]:
    """/metrics parsed with Prometheus' own text parser: {(sample name, sorted labels): value}; {} if not up."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}  # not listening yet
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


class ChatServer:
    """A local OpenAI-compatible chat-completions server, scripted per request, streaming the way the API does
    (https://platform.openai.com/docs/api-reference/chat-streaming: `data: <chunk>` server-sent events, then
    `data: [DONE]`; each chunk built and checked by the `openai` package's own `ChatCompletionChunk` type).

    `script(request)` gives the reply as a list of steps: a str (a piece of text), a dict (a tool call:
    {"name", "arguments"}), ("sleep", seconds) (SSE comments meanwhile), ("silence", seconds) (nothing at all),
    ("status", code, message) (an HTTP error instead of a stream),
    or ("garbage",) (a chunk that is not JSON). Counts requests and connections the client closed early."""

    def __init__(self, script: Callable[[dict], list], first_token_s: float = 0.0, key: str = "") -> None:
        import http.server
        import threading

        from openai.types.chat import ChatCompletionChunk

        # Build the chunk type's validators now: the first one costs ~1 s on a slow CPU, a delay no server has.
        ChatCompletionChunk.model_validate(
            {"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", "choices": []}
        )
        self.script, self.first_token_s, self.key = script, first_token_s, key
        self.requests: list[dict[str, Any]] = []
        self.closed_early = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                if server.key and self.headers.get("Authorization") != f"Bearer {server.key}":
                    return self._error(401, "Incorrect API key provided.")
                steps = server.script(body)
                if steps and isinstance(steps[0], tuple) and steps[0][0] == "status":
                    return self._error(steps[0][1], steps[0][2])
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    server._stream(self.wfile, body, steps)
                except (BrokenPipeError, ConnectionResetError):
                    server.closed_early += 1

            def _error(self, code: int, message: str) -> None:
                data = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}})
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def _stream(self, out: Any, request: dict[str, Any], steps: list) -> None:
        from openai.types.chat import ChatCompletionChunk

        n = 0

        def send(delta: dict[str, Any], finish: str | None = None) -> None:
            nonlocal n
            chunk = ChatCompletionChunk.model_validate(
                {
                    "id": "chatcmpl-local",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": request["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )
            out.write(f"data: {chunk.model_dump_json()}\n\n".encode())
            out.flush()
            n += 1

        def pause(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:  # an SSE comment every 50 ms: a closed connection shows at once
                time.sleep(min(0.05, max(0.0, end - time.monotonic())))
                out.write(b": waiting\n\n")
                out.flush()

        pause(self.first_token_s)
        send({"role": "assistant", "content": ""})
        calls = 0
        for step in steps:
            if isinstance(step, str):
                send({"content": step})
            elif isinstance(step, dict):
                head = {"index": calls, "id": f"call_{calls}", "type": "function"}
                send({"tool_calls": [{**head, "function": {"name": step["name"], "arguments": ""}}]})
                args = step["arguments"]
                for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                    send({"tool_calls": [{"index": calls, "function": {"arguments": part}}]})
                calls += 1
            elif step[0] == "sleep":
                pause(step[1])
            elif step[0] == "silence":  # nothing at all on the wire: what a read timeout is for
                time.sleep(step[1])
            elif step[0] == "garbage":
                out.write(b"data: {this is not json\n\n")
                out.flush()
        send({}, "tool_calls" if calls else "stop")
        out.write(b"data: [DONE]\n\n")
        out.flush()


REALTIME_REPLY = ["The time ", "is noon."]


TONE_HZ = 440


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * TONE_HZ * t) * 32767).astype("<i2")


class ScriptedRealtime:
    """A far Realtime server of one dialect, following that dialect's documented event flow (the sources are
    named on `Dialect` in agent/wire/realtime.py). It records what the client sends, with when, and answers each
    turn with REALTIME_REPLY and a tone in that dialect's events; `tool` makes it call `set_window` first,
    `error` makes it fail the turn, `reply_s` sets the tone's length."""

    def __init__(self, dialect: str, out_rate: int = 24_000, tool: bool = False, error: bool = False):
        self.dialect, self.out_rate, self.tool, self.error = dialect, out_rate, tool, error
        self.reply_s = 1.0
        self.events: list[dict] = []
        self.commit_at: list[float] = []  # when a commit that ends a turn arrived
        self.first_audio_at: list[float] = []  # when each response's first audio went out
        self.streaming: asyncio.Task | None = None
        self._heard_speech = False
        self._quiet_ms = 0.0
        self._n = 0

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]

    async def handler(self, ws):
        self.ws = ws
        first = {"type": "session.created", "session": {"type": "realtime"}}
        if self.dialect == "vllm-omni-turn":
            first = {"type": "session.created", "id": "sess-1", "created": 1}
        await ws.send(json.dumps(first))
        async for raw in ws:
            ev = json.loads(raw)
            self.events.append(ev)
            await self.on(ev)

    async def send(self, **event):
        await self.ws.send(json.dumps(event))

    async def on(self, ev):
        kind, d = ev["type"], self.dialect
        if kind == "input_audio_buffer.append" and d == "openai":
            await self.vad(np.frombuffer(base64.b64decode(ev["audio"]), "<i2"))
        elif kind == "input_audio_buffer.commit":
            if ev.get("final") is not False:
                self.commit_at.append(time.monotonic())
            if d == "dynamo" or (d == "vllm-omni-turn" and ev.get("final") is True):
                self.start()
            elif d == "vllm-omni":
                await self.send(type="input_audio_buffer.committed", item_id="item_in", previous_item_id=None)
        elif kind == "response.create" and d in ("openai", "vllm-omni"):
            self.start()
        elif kind == "response.cancel" and self.streaming is not None:
            self.streaming.cancel()
            await self.send(type="response.done", response={"id": f"resp_{self._n}", "status": "cancelled"})

    async def vad(self, pcm: np.ndarray) -> None:
        """The server's own turn detection, by energy: speech, then 600 ms of quiet."""
        loud = np.sqrt(np.mean((pcm / 32768.0) ** 2)) > 0.01
        self._heard_speech |= loud
        self._quiet_ms = 0.0 if loud else self._quiet_ms + pcm.size * 1000 / 24_000
        if self._heard_speech and self._quiet_ms >= 600:
            self._heard_speech = False
            await self.send(type="input_audio_buffer.speech_stopped", item_id="item_in", audio_end_ms=0)
            await self.send(type="input_audio_buffer.committed", item_id="item_in")
            await self.send(
                type="conversation.item.input_audio_transcription.completed",
                item_id="item_in",
                content_index=0,
                transcript="what time is it",
            )
            self.start()

    def start(self) -> None:
        self._n += 1
        self.streaming = asyncio.create_task(self.respond(self._n))

    async def respond(self, n: int) -> None:
        d, rid, item = self.dialect, f"resp_{n}", f"item_{n}"
        ids = {"response_id": rid, "item_id": item, "output_index": 0, "content_index": 0}
        if self.error:
            if d == "vllm-omni-turn":  # flat errors, and the audio's end always follows
                await self.send(type="error", error="the model failed", code="generation_error")
                await self.send(type="response.audio.done", has_audio=False)
            else:
                await self.send(type="error", error={"type": "server_error", "code": "omni_generation_error",
                                                     "message": "the model failed"})  # fmt: skip
                await self.send(type="response.done", response={"id": rid, "status": "failed"})
            return
        if d != "vllm-omni-turn":
            await self.send(type="response.created", response={"id": rid, "status": "in_progress"})
        answering_tool = self.events[-2].get("item", {}).get("type") == "function_call_output"
        if self.tool and not answering_tool:
            args = json.dumps({"window": "front", "position": 100})
            await self.send(
                type="response.function_call_arguments.done", call_id="call_1", name="set_window", arguments=args, **ids
            )
            await self.send(type="response.done", response={"id": rid, "status": "completed"})
            return
        for piece in REALTIME_REPLY:
            if d == "vllm-omni-turn":
                await self.send(type="transcription.delta", delta=piece)
            else:
                await self.send(type="response.output_audio_transcript.delta", delta=piece, **ids)
        pcm = tone(self.reply_s, self.out_rate)
        step = self.out_rate // 10
        for start in range(0, pcm.size, step):  # 100 ms deltas, at twice real time
            audio = base64.b64encode(pcm[start : start + step].tobytes()).decode()
            if start == 0:
                self.first_audio_at.append(time.monotonic())
            if d == "vllm-omni-turn":
                await self.send(type="response.audio.delta", audio=audio, format="pcm16", sample_rate_hz=self.out_rate)
            else:
                await self.send(type="response.output_audio.delta", delta=audio, **ids)
            await asyncio.sleep(0.05)
        if d == "vllm-omni-turn":
            await self.send(type="transcription.done", text="".join(REALTIME_REPLY))
            await self.send(type="response.audio.done", has_audio=True)
        else:
            await self.send(type="response.output_audio.done", **ids)
            await self.send(type="response.done", response={"id": rid, "status": "completed"})


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} is not installed; scripts/setup.sh --test installs it")
    return path


def speech_wav(text: str, path: Path, rate: int = 48_000, pad_before: float = 0.5, pad_after: float = 2.0) -> Path:
    """Speak `text` with espeak-ng into a mono WAV at `rate`, with silence around it."""
    raw = path.with_suffix(".raw.wav")
    subprocess.run([need("espeak-ng"), "-s", "150", "-w", str(raw), text], check=True, capture_output=True)
    sox = [need("sox"), str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(path)]
    subprocess.run([*sox, "pad", str(pad_before), str(pad_after)], check=True, capture_output=True)
    raw.unlink()
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path)) as w:
        data = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        return data.reshape(-1, w.getnchannels())[:, 0].copy(), w.getframerate()


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> Path:
    """Mono 16-bit, clipped."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def room_impulse(tmp: Path, reverberance: int = 50, rate: int = 48_000) -> np.ndarray:
    """A room's impulse response: sox's reverb of one click (float32 mono at `rate`, about 0.4 s)."""
    click = np.zeros(rate // 2, np.float32)
    click[0] = 0.5
    dry, wet = tmp / "click.wav", tmp / f"room{reverberance}.wav"
    write_wav(dry, click, rate)
    subprocess.run([need("sox"), str(dry), str(wet), "reverb", str(reverberance), "50", "60"], check=True)
    ir, got = read_wav(wet)
    assert got == rate
    return ir[: int(np.flatnonzero(np.abs(ir) > 1e-4).max()) + 1]


def cough(seed: int = 0, rate: int = 48_000, lead_s: float = 0.0) -> np.ndarray:
    """A cough: a burst of band-limited noise with a sharp attack, 250 ms, then a shorter second one."""
    rng = np.random.default_rng(seed)
    parts = [np.zeros(int(lead_s * rate), np.float32)]
    for length, level in ((0.25, 0.4), (0.15, 0.25)):
        n = int(length * rate)
        noise = np.convolve(rng.standard_normal(n), np.hanning(24) / 12, "same")
        env = np.exp(-np.arange(n) / (0.07 * rate)) * np.minimum(1, np.arange(n) / (0.01 * rate))
        parts += [(noise * env * level).astype(np.float32), np.zeros(int(0.08 * rate), np.float32)]
    return np.concatenate(parts)


def spoken(text: str, tmp: Path, rate: int = 48_000) -> np.ndarray:
    name = re.sub(r"\W+", "_", text)[:40]
    audio, sr = read_wav(speech_wav(text, tmp / f"{name}.wav", rate=rate, pad_before=0.2, pad_after=0.1))
    assert sr == rate
    return audio


def espeak_rendering(text: str, voice: str, rate: int = 16_000, speed: int = 160) -> np.ndarray:
    """espeak-ng's own rendering of `text` in `voice` (at 160 words a minute: the agent's speed), at `rate`."""
    wav = subprocess.run(
        [need("espeak-ng"), "-v", voice, "-s", str(speed), "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        source = w.getframerate()
    rs = StreamResampler(source, rate, quality="HQ")
    return np.concatenate([rs.process(pcm), rs.process(np.zeros(0, np.float32), last=True)])


def pink_noise(n: int, seed: int) -> np.ndarray:
    """1/f noise, like a car's road and engine noise: white noise shaped in the frequency domain, unit RMS."""
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    spectrum[1:] /= np.sqrt(np.arange(1, spectrum.size))
    spectrum[0] = 0
    pink = np.fft.irfft(spectrum, n)
    return pink / np.sqrt(np.mean(pink**2))


def with_noise(speech: np.ndarray, snr_db: float, seed: int) -> np.ndarray:
    """`speech` with pink noise `snr_db` below its voiced level (seeded: every run hears the same noise)."""
    voiced = speech[np.abs(speech) > 0.01]
    level = np.sqrt(np.mean(voiced**2)) if voiced.size else 0.1
    mixed = speech + pink_noise(speech.size, seed) * level * 10 ** (-snr_db / 20)
    return (mixed / max(1.0, np.abs(mixed).max())).astype(np.float32)


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


async def quiet_again(client: AgentClient, since: int, quiet_frames: int = 10, timeout: float = 20.0) -> None:
    """Wait until, after some sound from frame `since` on, the last `quiet_frames` 20 ms frames are silent."""

    def done() -> bool:
        frames = client.received.frames[since:]
        loud = [i for i, f in enumerate(frames) if np.abs(f).max() > 0.01]
        return bool(loud) and len(frames) - 1 - loud[-1] >= quiet_frames

    await wait_until(done, timeout)


def noise(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.1 * rng.standard_normal(t.size) + 0.3 * np.sin(2 * np.pi * (200 + 100 * seed) * t)).astype(np.float32)


CHROMIUM = "/usr/bin/chromium"


def chromium_flags(mic_wav: Path) -> list[str]:
    """Headless Chromium with `mic_wav` as its microphone, its media permitted, nothing it does on its own, and no
    throttling of a page in the background (the page's own timers measure voice to voice)."""
    return [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic_wav}",
        "--autoplay-policy=no-user-gesture-required",
        "--allow-loopback-in-peer-connection",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
    ]
