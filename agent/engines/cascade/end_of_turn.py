"""The end of a turn from sound and words: how long the silence after a pause must last.

Sans-I/O. At each pause two judges are asked: smart-turn, which hears
whether the turn sounds finished (`smart_turn.py`), and the words recognised
so far (`agent/profiles/turn_words.py`). The words decide when they are sure,
since a finished command or question ends the turn even when the voice
hesitates, and a dangling "to" holds it whatever the voice did; otherwise the
sound decides. The verdict is a silence (`media/endpoint.py`): short for a
finished turn, the profile's full one when unsure, a long hold for an
unfinished one, so that a slow speaker's "set the temperature to ... twenty
one degrees" is never cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config import switch_or_fields
from agent.profiles.turn_words import Words, WordsVerdict

# every verdict, counted under these names (`/metrics`: omni_engine_events{event="end_of_turn_<name>"})
REASONS = ("words_finished", "words_unfinished", "sound_finished", "sound_unfinished", "unjudged", "late", "failed")


@dataclass(frozen=True)
class WordsConfig:
    """`engine.options.turn_words`: false, or a mapping of these fields (true: the defaults)."""

    enabled: bool = True
    hold_ms: int = 1600  # the silence that ends a turn whose words are unfinished

    @classmethod
    def from_option(cls, value: Any) -> WordsConfig:
        cfg = switch_or_fields(cls, value, "engine.options.turn_words")
        if cfg.hold_ms <= 0:
            raise ValueError(f"engine.options.turn_words.hold_ms must be > 0, got {cfg.hold_ms}")
        return cfg


@dataclass(frozen=True)
class Verdict:
    silence_ms: int  # the turn ends after this much silence
    reason: str  # one of REASONS
    why: str = ""  # the words' reason, e.g. "ends with 'to'"


def decide(
    words: WordsVerdict | None,
    p_finished: float | None,
    threshold: float,
    short_ms: int,
    full_ms: int,
    hold_ms: int,
) -> Verdict:
    """The verdict on a pause from the words (None: not judged) and smart-turn's probability (None: not asked or
    failed). Never shorter than `short_ms`, never longer than `hold_ms`; `full_ms` when neither judge is sure."""
    if words is not None and words.kind is Words.UNFINISHED:
        return Verdict(max(full_ms, hold_ms), "words_unfinished", words.why)
    if words is not None and words.kind is Words.FINISHED:
        return Verdict(min(short_ms, full_ms), "words_finished", words.why)
    if p_finished is not None:
        if p_finished >= threshold:
            return Verdict(min(short_ms, full_ms), "sound_finished")
        return Verdict(full_ms, "sound_unfinished")
    return Verdict(full_ms, "unjudged")
