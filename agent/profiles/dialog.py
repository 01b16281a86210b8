"""Dialog policies: from what the user said to what the agent answers.

`DefaultAssistant` is a small, honest assistant: it tells the time and date,
repeats what it heard, says what it can do, answers whether it sees the user
and how many people are in view, and says plainly when it did not
understand. The in-car and translation policies build on these types;
`policies.make_policy` picks one for a profile.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Seen:
    """What the camera showed during the turn: None when it was off."""

    faces: int | None


@dataclass
class DialogContext:
    now: dt.datetime
    seen: Callable[[], Seen]  # computed only when a reply needs it (face detection costs)
    history: list[tuple[str, str]] = field(default_factory=list)  # (user, assistant) turns


@dataclass
class Reply:
    text: str
    intent: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments", "result"}
    lang: str = "en"
    speak: bool = True


class DialogPolicy(Protocol):
    """Whether the user may talk over a reply is the `Profile`'s say (agent/profiles/__init__.py), not the policy's.
    A policy may also say whether it `understands(text) -> bool` a request as it stands, without acting on it:
    the end of the turn is judged by it (agent/profiles/turn_words.py)."""

    def reply(self, text: str, ctx: DialogContext) -> Reply: ...


def normalise(text: str) -> str:
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _time(now: dt.datetime) -> str:
    hour = now.hour % 12 or 12
    return f"It's {hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}."


def _date(now: dt.datetime) -> str:
    return f"Today is {now.strftime('%A')}, {now.strftime('%B')} {now.day}, {now.year}."


def _people(n: int) -> str:
    return "one person" if n == 1 else f"{n} people"


CAPABILITIES = (
    "I'm a small assistant that runs entirely on this computer. I can tell you the time and the date, "
    "repeat what you say, and tell you whether I can see you and how many people are in view."
)

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # said over a reply to stop it (media/turn_taking.py cancels the reply): nothing to answer but that it stopped
    ("stop", re.compile(r"^(?:ok(?:ay)? )?(?:stop|wait|hold on|be quiet|quiet|shut up|enough|cancel|never ?mind)\b")),
    ("repeat_after", re.compile(r"^(?:please )?(?:repeat after me|say|repeat) (?!that\b|it\b)(?P<what>.+)$")),
    ("repeat_last", re.compile(r"\b(?:what did i (?:just )?say|repeat (?:that|it)|say (?:that|it) again)\b")),
    ("count", re.compile(r"\bhow many (?:people|persons|faces|of us)\b")),
    ("see_me", re.compile(r"\b(?:can|do) you see (?:me|us|anyone|anybody|my face)\b|\bam i (?:visible|on camera)\b")),
    ("time", re.compile(r"\bwhat(?:'s| is)? the time\b|\bwhat time\b|\btell me the time\b|\bthe time please\b|^time$")),
    ("date", re.compile(r"\b(?:what(?:'s| is)? (?:the |today's )?date|what day|which day|today's date)\b")),
    ("help", re.compile(r"\b(?:what can you do|help|who are you|what are you|what do you do)\b")),
    ("greet", re.compile(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening))\b")),
    ("thanks", re.compile(r"\b(?:thank you|thanks)\b")),
    ("bye", re.compile(r"\b(?:bye|goodbye|see you)\b")),
]


class DefaultAssistant:
    def understands(self, text: str) -> bool:
        """It has an answer for `text` as it stands (no side effects: asked while the user may go on)."""
        said = normalise(text)
        return bool(said) and any(p.search(said) for _, p in _PATTERNS)

    def reply(self, text: str, ctx: DialogContext) -> Reply:
        said = normalise(text)
        if not said:
            return Reply("Sorry, I didn't catch that. Could you say it again?", "empty")
        for intent, pattern in _PATTERNS:
            m = pattern.search(said)
            if m:
                return Reply(self._answer(intent, m, ctx), intent)
        return Reply(
            f'Sorry, I didn\'t understand "{text.strip()}". You can ask me for the time or the date, '
            "ask me to repeat something, or ask whether I can see you.",
            "unknown",
        )

    def _answer(self, intent: str, m: re.Match[str], ctx: DialogContext) -> str:
        if intent == "time":
            return _time(ctx.now)
        if intent == "date":
            return _date(ctx.now)
        if intent == "repeat_after":
            return m.group("what").strip().capitalize() + "."
        if intent == "repeat_last":
            if not ctx.history:
                return "You haven't said anything before this."
            return f'You said: "{ctx.history[-1][0].strip()}"'
        if intent in ("see_me", "count"):
            seen = ctx.seen()
            if seen.faces is None:
                return "Your camera is off, so I can't see anything. Turn it on and ask me again."
            if intent == "see_me":
                if seen.faces == 0:
                    return "Your camera is on, but I don't see anyone in the picture."
                return "Yes, I can see you." if seen.faces == 1 else f"Yes, I can see {_people(seen.faces)}."
            return "I don't see anyone." if seen.faces == 0 else f"I see {_people(seen.faces)}."
        if intent == "help":
            return CAPABILITIES
        if intent == "stop":
            return "Okay."
        if intent == "greet":
            return "Hello! How can I help?"
        if intent == "thanks":
            return "You're welcome."
        return "Goodbye! Talk to you later."
