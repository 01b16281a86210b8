"""The engine contract: what crosses between a session and any engine.

A session feeds an `EngineSession` aligned chunks, typed text and interrupts,
and reads its events in order; nothing else crosses. `feed`, `send_text` and
`interrupt` never block: an engine with heavy work hands it to its own worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from agent.profiles import Profile
from media.aligner import AlignedChunk


@dataclass(frozen=True, slots=True)
class TranscriptDelta:
    role: Literal["user", "assistant"]
    text: str
    final: bool
    # On the user's final transcript of a spoken turn: the last voiced tick and
    # the tick at which the turn's end was detected, so the session can time
    # endpointing and measure the rest from the moment of detection.
    speech_end_tick: int | None = None
    end_tick: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # added to the wire message (segment, lang, ...)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class SpeechFrame:
    pcm: np.ndarray  # float32, 24 kHz mono; 1920 samples (80 ms) unless the first of a stream
    index: int


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TurnEnd:
    interrupted: bool = False
    # Engine-measured stage times in ms (e.g. recognition_ms, synthesis_ms) and names (e.g. end_reason: what
    # ended the turn), added to the turn's metrics message.
    stages: dict[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Error:
    code: str
    message: str


EngineEvent = TranscriptDelta | TextDelta | SpeechFrame | ToolCall | TurnEnd | Error


class EngineSession(Protocol):
    # Set under overload: answer new turns in text only (no speech).
    text_only: bool
    # Set by the session: milliseconds of the current reply the transport has sent the client (what was played,
    # but for the client's buffer). An engine that must tell a server how much of a cut reply was heard (the
    # realtime engine's truncate) reads it rather than guessing from wall time; the others leave it unread.
    played_ms: Callable[[], float]

    def feed(self, chunk: AlignedChunk) -> None: ...

    def send_text(self, text: str) -> None: ...

    def interrupt(self) -> None: ...

    def events(self) -> AsyncIterator[EngineEvent]: ...

    async def close(self) -> None: ...

    def counters(self) -> dict[str, float]:
        """The engine's own cumulative counts (e.g. end-of-turn verdicts), a fixed set of names per engine:
        `/metrics` shows them as `omni_engine_events{event=...}`, summed over sessions."""
        ...


class Engine(Protocol):
    name: str
    # True when speech frames come at the pace of the input (echo stream):
    # the output keeps only a short backlog and drops rather than lag.
    live_output: bool

    async def open_session(self, profile: Profile, options: dict[str, Any] | None = None) -> EngineSession:
        """`options`: per-session choices from the offer and the config (e.g. translation languages)."""
        ...

    async def close(self) -> None: ...
