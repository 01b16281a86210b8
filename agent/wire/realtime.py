"""The OpenAI Realtime protocol, sans-I/O: its events and its PCM16 audio, for both ends.

`/v1/realtime` (agent/transport/realtime.py) reads client events with
`parse_client_event` and writes a session's messages as server events with
`ResponseWriter`; the `realtime` engine (agent/engines/realtime.py) writes
client events with the constructors here and reads server events with
`parse_event` and the event names below. Audio is PCM16 mono, base64, at 24 kHz (16 kHz where
both ends offer it: our addition, which spares a resampling on each side).
Reference: https://platform.openai.com/docs/api-reference/realtime (the GA
event names; the beta names of audio and text deltas are read too).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.wire.messages import Error, Metrics, ServerMessage, State, ToolRun, Transcript
from media.pcm import float_to_s16

RATE = 24_000
RATES = (16_000, 24_000)
Event = dict[str, Any]


class RealtimeError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


# ---------------------------------------------------------------- PCM16


def encode_pcm16(pcm: np.ndarray) -> str:
    """float32 in [-1, 1] (or int16) to base64 little-endian PCM16."""
    s16 = pcm if pcm.dtype == np.int16 else float_to_s16(pcm)
    return base64.b64encode(s16.astype("<i2").tobytes()).decode()


def decode_pcm16(data: Any) -> np.ndarray:
    """base64 PCM16 to int16 samples; RealtimeError if it is not that."""
    if not isinstance(data, str):
        raise RealtimeError("invalid_audio", "audio must be a base64 string of PCM16")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RealtimeError("invalid_audio", f"audio is not base64: {exc}") from None
    if len(raw) % 2:
        raise RealtimeError("invalid_audio", "PCM16 audio has an even number of bytes")
    return np.frombuffer(raw, "<i2")


# ---------------------------------------------------------------- sessions


def session_object(
    rate: int,
    model: str = "",
    voice: str = "",
    offer_rates: bool = False,
    instructions: str = "",
    server_vad: bool = True,
) -> Event:
    """The `session` of session.created/updated (server) or session.update (client). Without server VAD
    (`turn_detection` null) the client commits each turn."""
    session: Event = {
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": rate},
                "turn_detection": {"type": "server_vad"} if server_vad else None,
            },
            "output": {"format": {"type": "audio/pcm", "rate": RATE}},
        },
    }
    if model:
        session["model"] = model
    if instructions:
        session["instructions"] = instructions
    if voice:
        session["audio"]["output"]["voice"] = voice
    if offer_rates:
        session["audio"]["input"]["rates"] = list(RATES)
    return session


def _input(session: Any) -> Event:
    if not isinstance(session, dict):
        return {}
    audio = session.get("audio")
    inp = audio.get("input") if isinstance(audio, dict) else None
    return inp if isinstance(inp, dict) else {}


def input_rate(session: Any) -> int | None:
    """The input audio rate a session object names, if any."""
    fmt = _input(session).get("format")
    rate = fmt.get("rate") if isinstance(fmt, dict) else None
    return rate if isinstance(rate, int) else None


def offered_rates(session: Any) -> list[int]:
    rates = _input(session).get("rates")
    return [r for r in rates if isinstance(r, int)] if isinstance(rates, list) else []


# ---------------------------------------------------------------- client events


def append_audio(pcm: np.ndarray) -> Event:
    return {"type": "input_audio_buffer.append", "audio": encode_pcm16(pcm)}


def user_text(text: str) -> Event:
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    }


def session_update(session: Event) -> Event:
    return {"type": "session.update", "session": session}


RESPONSE_CREATE: Event = {"type": "response.create"}
RESPONSE_CANCEL: Event = {"type": "response.cancel"}


@dataclass(frozen=True, slots=True)
class AudioIn:
    pcm: np.ndarray  # int16


@dataclass(frozen=True, slots=True)
class TextIn:
    text: str


@dataclass(frozen=True, slots=True)
class SetRate:
    rate: int | None  # None: the update named no rate


@dataclass(frozen=True, slots=True)
class Cancel:
    pass


@dataclass(frozen=True, slots=True)
class Ack:
    reply: str  # the event type that acknowledges it


@dataclass(frozen=True, slots=True)
class Ignore:
    pass


ClientEvent = AudioIn | TextIn | SetRate | Cancel | Ack | Ignore
ACKS = {
    "input_audio_buffer.commit": "input_audio_buffer.committed",
    "input_audio_buffer.clear": "input_audio_buffer.cleared",
}


def parse_event(raw: str | bytes) -> Event:
    if isinstance(raw, bytes):
        raise RealtimeError("invalid_event", "events are JSON text, not binary")
    try:
        event = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RealtimeError("invalid_event", f"malformed JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise RealtimeError("invalid_event", "an event is a JSON object with a string 'type'")
    return event


def parse_client_event(event: Event) -> ClientEvent:
    """What a client's event asks of the session. Turn ends come from the server's own VAD: a commit or clear
    is acknowledged so clients move on, and answers start by themselves (`response.create` is a no-op)."""
    kind = event["type"]
    if kind == "session.update":
        return SetRate(input_rate(event.get("session")))
    if kind == "input_audio_buffer.append":
        return AudioIn(decode_pcm16(event.get("audio")))
    if kind in ACKS:
        return Ack(ACKS[kind])
    if kind == "conversation.item.create":
        item = event.get("item")
        content = item.get("content") if isinstance(item, dict) else None
        texts = [c["text"] for c in content or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
        if not any(t.strip() for t in texts):
            raise RealtimeError("invalid_item", "only user messages with text content are supported")
        return TextIn(" ".join(texts))
    if kind == "response.create":
        return Ignore()
    if kind == "response.cancel":
        return Cancel()
    raise RealtimeError("unknown_event", f"unknown event type {kind!r}")


# ---------------------------------------------------------------- server events


# Errors that are the client's doing; the rest are the server's.
CLIENT_FAULTS = frozenset(
    ("invalid_event", "invalid_audio", "invalid_item", "invalid_format", "unknown_event", "unauthorized")
    + ("bad_request", "too_large", "rate_limited")
)


def error_event(code: str, message: str, event_id: Any = None) -> Event:
    kind = "invalid_request_error" if code in CLIENT_FAULTS else "server_error"
    return {"type": "error", "error": {"type": kind, "code": code, "message": message, "event_id": event_id}}


class ResponseWriter:
    """A session's messages (the `/ws` vocabulary: transcript, state, tool, metrics, error) and its speech, as
    Realtime server events. A response opens at the first reply text or audio and closes when the session is
    listening again, `cancelled` if the turn was interrupted."""

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.item_id = ""
        self._text = ""  # the reply's transcript so far
        self._interrupted = False

    def _begin(self) -> list[Event]:
        if self.response_id is not None:
            return []
        self.response_id, self.item_id, self._text, self._interrupted = new_id("resp"), new_id("item"), "", False
        return [{"type": "response.created", "response": {"id": self.response_id, "status": "in_progress"}}]

    def _ids(self) -> Event:
        return {"response_id": self.response_id, "item_id": self.item_id, "output_index": 0, "content_index": 0}

    def audio(self, pcm: np.ndarray) -> list[Event]:
        out = self._begin()
        out.append({"type": "response.output_audio.delta", **self._ids(), "delta": encode_pcm16(pcm)})
        return out

    def message(self, msg: ServerMessage) -> list[Event]:
        """A session message as the Realtime events that say it."""
        if isinstance(msg, Transcript) and msg.role == "user":
            if not msg.final:
                return []
            item = new_id("item")
            return [
                {"type": "input_audio_buffer.speech_stopped", "item_id": item},
                {"type": "input_audio_buffer.committed", "item_id": item},
                {
                    "type": "conversation.item.input_audio_transcription.completed",
                    "item_id": item,
                    "content_index": 0,
                    "transcript": msg.text,
                },
            ]
        if isinstance(msg, Transcript):  # the reply's text so far
            text = msg.text
            delta = text[len(self._text) :] if text.startswith(self._text) else text
            out = self._begin()
            self._text = text
            if delta:
                out.append({"type": "response.output_audio_transcript.delta", **self._ids(), "delta": delta})
            return out
        if isinstance(msg, ToolRun):
            return [
                {
                    "type": "response.function_call_arguments.done",
                    "name": msg.name,
                    "arguments": json.dumps(dict(msg.arguments)),
                    "call_id": new_id("call"),
                }
            ]
        if isinstance(msg, Error):
            return [error_event(msg.code, msg.message, msg.event_id)]
        if isinstance(msg, Metrics):
            self._interrupted = bool(msg.figures.get("interrupted"))
            return []
        if msg == State("listening"):
            return self.end()
        return []

    def end(self) -> list[Event]:
        """Close the open response, if any."""
        if self.response_id is None:
            return []
        ids = {"response_id": self.response_id, "item_id": self.item_id}
        status = "cancelled" if self._interrupted else "completed"
        out = [
            {"type": "response.output_audio_transcript.done", **ids, "transcript": self._text},
            {"type": "response.output_audio.done", **ids},
            {"type": "response.done", "response": {"id": self.response_id, "status": status}},
        ]
        self.response_id = None
        return out


# ---------------------------------------------------------------- reading server events (the client side)

TEXT_DELTAS = (  # the GA names, the beta names, and vLLM-Omni's older flow's
    "response.output_audio_transcript.delta",
    "response.audio_transcript.delta",
    "response.output_text.delta",
    "response.text.delta",
    "transcription.delta",
)
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
KNOWN_PREFIXES = (
    "session.",
    "input_audio_buffer.",
    "conversation.",
    "response.",
    "rate_limits.",
    "transcription_session.",
    "transcription.",
)


# ---------------------------------------------------------------- dialects: what each kind of server expects


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one kind of Realtime server is spoken to (the `realtime` engine's `--realtime-dialect`).

    Sources, as read for this table: OpenAI's Realtime API (GA event types in the `openai` package,
    openai/types/realtime/); vLLM-Omni's docs/serving/realtime_openai_duplex_api.md and its handler
    vllm_omni/entrypoints/openai/realtime/connection.py (the OpenAI-like flow: the client commits, then asks
    for a response); vLLM-Omni's docs/serving/realtime_api.md (the older flow: commit final=false starts a
    generation over the incoming 16 kHz stream, commit final=true ends it; `transcription.delta` text,
    `response.audio.delta` audio with `sample_rate_hz`); NVIDIA Dynamo's omni realtime worker
    (components/src/dynamo/vllm/omni/realtime_handler.py: 16 kHz, every commit ends the turn, each
    utterance handled alone, no cancel)."""

    name: str
    input_rate: int  # PCM16 rate the server takes (16 kHz is used where our own server offers it, see `offered_rates`)
    server_turns: bool  # the server's VAD ends turns; otherwise our end of turn commits
    commit_response: bool  # after our commit, `response.create` starts the reply
    commit_final: bool  # commit {final: false} at the first pause, {final: true} at the end
    full_session: bool  # `session.update` carries instructions and tools (else the model only)
    cancel: bool  # `response.cancel` and `conversation.item.truncate` are understood
    keeps_history: bool  # the server remembers earlier turns
    end_events: tuple[str, ...] = ("response.done",)


DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect("openai", RATE, server_turns=True, commit_response=False, commit_final=False, full_session=True,
                cancel=True, keeps_history=True),
        Dialect("vllm-omni", RATE, server_turns=False, commit_response=True, commit_final=False, full_session=True,
                cancel=True, keeps_history=True),
        Dialect("vllm-omni-turn", 16_000, server_turns=False, commit_response=False, commit_final=True,
                full_session=False, cancel=False, keeps_history=False,
                end_events=("response.audio.done", "response.output_audio.done")),
        Dialect("dynamo", 16_000, server_turns=False, commit_response=False, commit_final=False, full_session=False,
                cancel=False, keeps_history=False),
    )
}  # fmt: skip


def dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown realtime dialect {name!r}; known: {', '.join(DIALECTS)}") from None


def audio_of(event: Event, default_rate: int = RATE) -> tuple[np.ndarray, int]:
    """An audio delta's PCM16 samples (under `delta` or `audio`) and their rate (`sample_rate_hz` where given)."""
    rate = event.get("sample_rate_hz", default_rate)
    if not isinstance(rate, int) or not 8_000 <= rate <= 192_000:
        raise RealtimeError("invalid_audio", f"an audio delta at {rate!r} Hz")
    return decode_pcm16(event.get("delta", event.get("audio"))), rate


def error_of(event: Event) -> tuple[str, str]:
    """(code, message) of an error event, nested (`error: {code, message}`) or flat (`error: "...", code`)."""
    err = event.get("error")
    if isinstance(err, dict):
        return str(err.get("code") or "remote_error"), str(err.get("message", "unknown error"))
    return str(event.get("code") or "remote_error"), str(err or "unknown error")


def commit(final: bool | None = None) -> Event:
    return {"type": "input_audio_buffer.commit", **({} if final is None else {"final": final})}


def function_output(call_id: str, output: Any) -> Event:
    return {
        "type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": call_id, "output": json.dumps(output)},
    }


def truncate(item_id: str, audio_end_ms: int) -> Event:
    return {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": audio_end_ms}


def flat_tools(tools: list[Event]) -> list[Event]:
    """Chat-completions tool definitions in the Realtime API's flat shape."""
    return [{"type": "function", **t["function"]} for t in tools]
