"""Dialog policies: from what the user said to what the agent answers.

`DefaultAssistant` is a small, honest assistant: it tells the time and date,
repeats what it heard, says what it can do, answers whether it sees the user
and how many people are in view, and says plainly what it cannot do. A
request is read by its grammar first (exact, slots and all), then by meaning
(`understanding.py`): acted on when near an example, asked back ("Did you
mean ...?") when only close. The in-car and translation policies build on
these types; `policies.make_policy` picks one for a profile.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.profiles.understanding import IntentModel, normalise, vocabulary


@dataclass
class Seen:
    """What the camera showed during the turn: None when it was off."""

    faces: int | None


@dataclass
class DialogContext:
    now: dt.datetime
    seen: Callable[[], Seen]  # computed only when a reply needs it (face detection costs)
    history: list[tuple[str, str]] = field(default_factory=list)  # (user, assistant) turns
    heard: bool = False  # the words are what a recogniser heard (they may be misheard), not what was typed


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
    the end of the turn is judged by it (agent/profiles/turn_words.py); and whether it `acts_on(text) -> bool`
    (would act on it or answer it, not ask back or refuse), with the `vocabulary` its requests are made of: a
    spoken request it would not act on is read again (agent/engines/cascade/second_reading.py). One that holds
    a process has `close()`, called when its session ends."""

    def reply(self, text: str, ctx: DialogContext) -> Reply: ...


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
    (
        "stop",
        re.compile(
            r"^(?:ok(?:ay)? )?(?:stop|wait|hold on|be quiet|quiet|shut up|enough|cancel|never ?mind)\b|"
            r"(?<!don't )(?<!not )\b(?:stop|cancel|be quiet|shut up|that's enough)$"  # "not now, I'm busy, cancel"
        ),
    ),
    (
        "repeat_last",
        re.compile(
            r"\b(?:what did i (?:just )?say|repeat (?:that|it)|say (?:that|it) again)\b|"
            r"\b(?:repeat|echo|read back|say back) (?:my last|what i)\b"
        ),
    ),
    (
        "repeat_after",
        re.compile(
            r"^(?:please |just |um |so |can you |could you |would you )*"
            r"(?:repeat after me|say|repeat|echo this|echo) (?!that\b|it\b)(?P<what>.+)$|"
            r"\b(?:repeat after me|say after me|echo this|say the words?|say this)\b (?P<after>.+)$"
        ),
    ),
    ("count", re.compile(r"\bhow many (?:people|persons|faces|of us)\b")),
    ("see_me", re.compile(r"\b(?:can|do) you see (?:me|us|anyone|anybody|my face)\b|\bam i (?:visible|on camera)\b")),
    ("time", re.compile(r"\bwhat(?:'s| is)? the time\b|\bwhat time\b|\btell me the time\b|\bthe time please\b|^time$")),
    ("date", re.compile(r"\b(?:what(?:'s| is)? (?:the |today's )?date|what day|which day|today's date)\b")),
    ("thanks", re.compile(r"\b(?:thank you|thanks)\b")),
    ("help", re.compile(r"\b(?:what can you do|help|who are you|what are you|what do you do)\b")),
    ("greet", re.compile(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening))\b")),
    ("bye", re.compile(r"\b(?:bye|goodbye|see you|take care)\b")),
]


# A skill's words asking what no skill does: a timer or an alarm ("set a timer" is no time), translating ("how
# do you say thanks in Hindi" is no "say ..."), reading messages ("read my last text" is no "what I said"), a
# place's hours ("what time does the shop close"), what the camera shows ("what do you see" is no "can you see
# me")
NO_SKILL = re.compile(
    r"\b(?:timers?|alarms?|reminders?|stopwatch)\b|"
    r"\bhow (?:do|would|can|should) (?:you|i|we|one) say\b.*\bin [a-z]+$|\btranslat(?:e|ion)\b|"
    r"\bread (?:me |out )?(?:my|the|that|this) (?:last |latest |new |recent )?(?:texts?|messages?|e ?mails?|sms)\b|"
    r"\bwhat time (?:does|did|will|are)\b|\bwhat time do (?!you\b)|\bwhen does\b.*\b(?:open|close|start|finish|end)\b|"
    r"\bin (?:french|spanish|german|italian|portuguese|chinese|mandarin|cantonese|japanese|korean|hindi|arabic|"
    r"russian|dutch|polish|turkish|greek|swedish|latin|irish|welsh)$|"
    # the camera says whether someone is there and how many, not what it shows
    r"\bwhat (?:do|can) you see\b|\bdescribe (?:what|the|this|everything)\b|\bwhat am i (?:holding|wearing|doing)\b|"
    r"\bam i (?:smiling|wearing|holding)\b|\b(?:turn|switch) (?:off|on) (?:the |my |your )?camera\b|"
    r"\bcan you hear me\b|\bzoom\b|\brecogni[sz]e (?:me|my|who|people|faces?|him|her|them|us|this person)\b|"
    r"\bwho am i$|\bfrom my face\b|\bread (?:it|them|that) out\b|"
    # ... nor how someone looks, nor what is written in it
    r"\b(?:do|does) (?:i|my \w+) look\b|\bhow do i look\b|\bam i looking\b|\bis my (?:hair|outfit|makeup|shirt|tie)\b|"
    r"\bwhat do you think of my\b|\bread (?:what|the|this|that)\b.*\b(?:says|sign|label|text|writing|page|screen)\b|"
    # ... nor what a thing held up is, nor things that are not people (it counts faces)
    r"\bwhat(?:'s| is) (?:this|that)\b.*\b(?:holding|camera)\b|"
    r"\bwhat does (?:this|that|the) (?:sign|label|note|page|card|paper|screen|letter|writing|text|book)\b|"
    r"\bhow many (?!people|persons|faces|heads|of us|humans|men|women|kids|children|guys|folks?|adults|friends)"
    r"\w+ (?:can you see|do you see|are (?:there|in))\b|"
    # facts about people: no count of the camera's
    r"\bhow many people (?:live|lived|died|work|speak|visit|use)\b|\bpopulation\b|"
    # a recording
    r"\brecord (?:what|this|me|my|it|a)\b"
)
INTENTS = frozenset(intent for intent, _ in _PATTERNS)  # what the default assistant can answer
# Words that belong to one intent, wherever they stand in a request (`IntentModel.guess`'s cues)
CUES = {
    "time": re.compile(r"\b(?:time|clock|o'clock|hour|late|early)\b"),
    "date": re.compile(r"\b(?:date|day|today|month|year|weekday|weekend|calendar)\b"),
    "see_me": re.compile(r"\b(?:see|camera|visible|picture|frame|shot|video|webcam|notice|spot)\b"),
    "count": re.compile(r"\b(?:how many|count|number of|headcount|people|persons|faces)\b"),
    "help": re.compile(r"\b(?:what can you|able to|help|yourself|your name|features|abilities|commands|skills)\b"),
    "repeat_last": re.compile(r"\b(?:i said|i say|i told|my last|i just)\b"),
    "repeat_after": re.compile(r"\b(?:repeat after|say after|echo|parrot|say the words?)\b"),
}


def cued(said: str, cues: dict[str, re.Pattern[str]]) -> list[str]:
    return [intent for intent, words in cues.items() if words.search(said)]


# What a request read by meaning asks, where its words say more than its nearest example: the model's
# neighbours blur these pairs ("what day is it" is near "what time is it")
_REFINE = [
    ("date", ("time",), re.compile(r"\b(?:day|date|month|year|week|today|weekday)\b")),
    ("time", ("date",), re.compile(r"\b(?:time|clock|hour|late|o'clock|noon|midnight)\b")),
    ("count", ("see_me",), re.compile(r"\b(?:how many|count|number of|more than|people|persons|faces)\b")),
    ("bye", ("greet",), re.compile(r"\b(?:bye|later|night|soon|leaving|off now)\b")),
]
# A short answer to "Did you mean ...?"
YES = re.compile(r"^(?:yes|yeah|yep|yup|sure|please|correct|right|exactly|ok|okay|do it|go ahead|that's right)\b")
NO = re.compile(r"^(?:no|nope|nah|not|wrong|never ?mind|cancel)\b")


def answer(said: str) -> bool | None:
    """`said` (normalised) as an answer to "Did you mean ...?": yes, a short no, or None: something else."""
    if YES.search(said):
        return True
    return False if NO.search(said) and len(said.split()) <= 3 else None


_ASK = {
    "time": "the time",
    "date": "today's date",
    "repeat_after": "that I repeat something after you",
    "repeat_last": "what you said last",
    "see_me": "whether I can see you",
    "count": "how many people I can see",
    "help": "what I can do",
    "stop": "that I stop",
}
_WHAT = re.compile(
    r"\b(?:say|repeat|echo|parrot)(?: this| that| back| after me| the following| it back to me)*[: ]+(?P<what>.+)$"
)


def refine(intent: str, said: str) -> str:
    for better, over, words in _REFINE:
        if intent in over and words.search(said):
            return better
    return intent


DECLINED = Reply("Okay. What would you like?", "declined")


class DefaultAssistant:
    OUT_OF_SCOPE = (
        "Sorry, that's not something I can do. I can tell you the time or the date, repeat what you say, "
        "and tell you whether I can see you and how many people are in view."
    )

    def __init__(self, model: IntentModel | None = None) -> None:
        self._model = model
        self.asked: str | None = None  # the intent of a "Did you mean ...?" the user has not answered yet

    @property
    def model(self) -> IntentModel:
        """Built at its first use (the process's first session, unless `policies.load_intent_models` ran)."""
        if self._model is None:
            self._model = IntentModel.for_profile("default")
        return self._model

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The words its requests are made of, for a second reading (`acts_on`)."""
        return vocabulary("default")

    def understands_exactly(self, text: str) -> bool:
        """Its grammar reads `text`."""
        said = normalise(text)
        return bool(said) and not NO_SKILL.search(said) and any(p.search(said) for _, p in _PATTERNS)

    def understands(self, text: str) -> bool:
        """It has an answer for `text` as it stands (no side effects: asked while the user may go on): its grammar
        reads it, or it answers a question asked back. A reading by meaning does not end a turn sooner: a near
        example is no proof that the user has finished ("could you make it a bit ...")."""
        said = normalise(text)
        return self.understands_exactly(said) or (self.asked is not None and answer(said) is not None)

    def reply(self, text: str, ctx: DialogContext) -> Reply:
        said = normalise(text)
        if not said:
            return Reply("Sorry, I didn't catch that. Could you say it again?", "empty")
        asked, self.asked = self.asked, None
        if asked is not None and (yes := answer(said)) is not None:
            return Reply(self._answer(asked, None, ctx), asked) if yes else DECLINED
        intent, act, what = self._read(text, ctx.heard)
        if intent is None:  # out of scope; or, in the car's model, a car topic it did not act on
            return Reply(self.OUT_OF_SCOPE, "unknown")
        if act:
            return Reply(self._answer(intent, what, ctx), intent)
        self.asked = intent
        return Reply(f"Did you mean {_ASK[intent]}?", "ask")

    def _read(self, text: str, heard: bool) -> tuple[str | None, bool, str | None]:
        """What `text` (not empty once normalised) asks (None: out of scope), whether it is sure enough to answer
        (else asked back), and what to repeat. The grammar reads it word for word and the model checks it: where
        the model is sure it asks something else (another skill, or none: "what time does the pharmacy close",
        "help me write a card"), the grammar caught a word, not the request, and the model's reading stands. A
        car topic the model is sure of is the car's to weigh (`InCarAssistant.understand`). `heard`: see
        `IntentModel.guess`."""
        said = normalise(text)
        if NO_SKILL.search(said):
            return None, False, None
        guess = self.model.guess(text, cued(said, CUES), heard)
        for intent, pattern in _PATTERNS:
            if m := pattern.search(said):
                if not self.model.overrules(guess, intent, INTENTS):
                    return intent, True, m.groupdict().get("what") or m.groupdict().get("after")
                break
        if guess.intent not in INTENTS:
            return None, False, None
        intent = refine(guess.intent, said)
        what = m.group("what") if intent == "repeat_after" and (m := _WHAT.search(said)) else None
        return intent, guess.sure or intent not in _ASK, what

    def acts_on(self, text: str) -> bool:
        """`reply` would answer `text` heard (not ask back, not say it cannot): no side effects. A request it would
        not is read again, leaning toward `vocabulary` (agent/engines/cascade/second_reading.py)."""
        said = normalise(text)
        if not said:
            return False
        return (self.asked is not None and answer(said) is not None) or self._read(text, heard=True)[1]

    def _answer(self, intent: str, what: str | None, ctx: DialogContext) -> str:
        if intent == "time":
            return _time(ctx.now)
        if intent == "date":
            return _date(ctx.now)
        if intent == "repeat_after":
            what = re.sub(r"^(?:please |for me )+", "", what or "").strip()
            return what.capitalize() + "." if what else "What should I repeat? Say: repeat after me, then the words."
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
