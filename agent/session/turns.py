"""Turn state and per-turn latency figures, as the session's messages (`wire/messages.py`).

Sans-I/O: the session reports what happened and when (from an injected
clock); this returns the messages to send. States: listening -> thinking
(the user's turn ended) -> speaking (the first speech frame is out) ->
listening (the reply ended or was interrupted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agent.wire.messages import Metrics, ServerMessage, State, Transcript, TurnState
from media.clock import TICK_MS

Message = ServerMessage
EMPTY: Mapping[str, Any] = MappingProxyType({})  # an engine's extra fields on a transcript: none


@dataclass
class TurnFigures:
    turn: int
    endpoint_ms: float | None = None
    first_text_ms: float | None = None
    first_audio_ms: float | None = None
    interrupted: bool = False


@dataclass
class TurnTracker:
    state: TurnState = "listening"
    turn: int = 0
    _start: float | None = None
    _current: TurnFigures | None = None

    def _set(self, state: TurnState) -> list[Message]:
        if state == self.state:
            return []
        self.state = state
        return [State(state)]

    def user_final(
        self,
        start: float,
        text: str,
        end_tick: int | None = None,
        speech_end_tick: int | None = None,
        extra: Mapping[str, Any] = EMPTY,
    ) -> list[Message]:
        """`start`: when the end of the turn was known (later figures count from it)."""
        self.turn += 1
        self._start = start
        endpoint = None
        if end_tick is not None and speech_end_tick is not None:
            endpoint = max(0, end_tick - speech_end_tick) * TICK_MS
        self._current = TurnFigures(self.turn, endpoint_ms=endpoint)
        return [Transcript("user", text, True, self.turn, extra), *self._set("thinking")]

    def user_partial(self, text: str, extra: Mapping[str, Any] = EMPTY) -> list[Message]:
        return [Transcript("user", text, False, self.turn + 1, extra)]

    def assistant_text(self, now: float, text: str, final: bool, extra: Mapping[str, Any] = EMPTY) -> list[Message]:
        cur = self._current
        if cur is not None and cur.first_text_ms is None and self._start is not None:
            cur.first_text_ms = (now - self._start) * 1000
        return [Transcript("assistant", text, final, self.turn, extra)]

    def speech(self, now: float) -> list[Message]:
        cur = self._current
        if cur is not None and cur.first_audio_ms is None and self._start is not None:
            cur.first_audio_ms = (now - self._start) * 1000
        return self._set("speaking")

    def turn_end(self, interrupted: bool, stages: dict[str, float | str] | None = None) -> list[Message]:
        msgs: list[Message] = []
        cur = self._current
        if cur is not None:
            cur.interrupted = interrupted
            figures = {
                "endpoint_ms": cur.endpoint_ms,
                "first_text_ms": _round(cur.first_text_ms),
                "first_audio_ms": _round(cur.first_audio_ms),
                "interrupted": interrupted,
                **{k: _round(v) for k, v in (stages or {}).items()},
            }
            msgs.append(Metrics(cur.turn, figures))
            self._current = None
            self._start = None
        return msgs + self._set("listening")


def _round(v: float | str | None) -> float | str | None:
    return v if v is None or isinstance(v, str) else round(v, 1)
