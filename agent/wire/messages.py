"""The messages of a session, typed: what a client asks (`/ws`) and what the session tells it.

Sans-I/O. The session makes `ServerMessage`s without knowing the protocol; each transport writes them in its
own: `to_wire` is the `/ws` JSON (README, "The wire protocol"), `wire/realtime.py` turns them into Realtime
events. `wire/signalling.parse_message` checks a client's JSON and returns a `ClientMessage`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

TurnState = Literal["listening", "thinking", "speaking"]


# ---- client to server (/ws)


@dataclass(frozen=True, slots=True)
class Offer:
    sdp: str
    profile: str | None = None  # None: the server's
    source_lang: str | None = None
    target_lang: str | None = None
    text_only: bool = False
    echo_cancelled: bool = False  # the client cancels the agent's voice itself
    token: str | None = None


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Interrupt:
    pass


@dataclass(frozen=True, slots=True)
class Bye:
    pass


@dataclass(frozen=True, slots=True)
class ClientMetrics:
    voice_to_voice_ms: float | None = None


ClientMessage = Offer | Text | Interrupt | Bye | ClientMetrics


# ---- server to client


@dataclass(frozen=True, slots=True)
class Answer:
    sdp: str
    session: str
    engine: str
    profile: str
    worker: int  # the server process's pid (with `--workers`, which one holds the session)


@dataclass(frozen=True, slots=True)
class State:
    state: TurnState


@dataclass(frozen=True, slots=True)
class Transcript:
    role: Literal["user", "assistant"]
    text: str
    final: bool
    turn: int
    extra: Mapping[str, Any] = field(default_factory=dict)  # an engine's: segment, lang, end_ms, notice


@dataclass(frozen=True, slots=True)
class Metrics:
    turn: int
    figures: Mapping[str, float | str | bool | None]  # endpoint_ms, first_audio_ms, interrupted, an engine's stages


@dataclass(frozen=True, slots=True)
class ToolRun:
    name: str
    arguments: Mapping[str, Any]
    result: Any


@dataclass(frozen=True, slots=True)
class Error:
    code: str
    message: str
    event_id: str | None = None  # the client event it answers, where the protocol names them (Realtime)


ServerMessage = Answer | State | Transcript | Metrics | ToolRun | Error

_TYPES: dict[type, str] = {
    Answer: "answer",
    State: "state",
    Transcript: "transcript",
    Metrics: "metrics",
    ToolRun: "tool",
    Error: "error",
}


def to_wire(msg: ServerMessage) -> dict[str, Any]:
    """The `/ws` JSON object of a message."""
    if isinstance(msg, Transcript):
        return {
            "type": "transcript",
            "role": msg.role,
            "text": msg.text,
            "final": msg.final,
            "turn": msg.turn,
            **msg.extra,
        }
    if isinstance(msg, Metrics):
        return {"type": "metrics", "turn": msg.turn, **msg.figures}
    if isinstance(msg, ToolRun):
        return {"type": "tool", "name": msg.name, "arguments": dict(msg.arguments), "result": msg.result}
    if isinstance(msg, Error):
        return {"type": "error", "code": msg.code, "message": msg.message}
    body = {name: getattr(msg, name) for name in msg.__slots__}  # type: ignore[union-attr]
    return {"type": _TYPES[type(msg)], **body}
