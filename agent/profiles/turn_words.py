"""Whether the words said so far end a turn: the transcript's half of the end-of-turn verdict.

A model that hears how a turn sounds (smart-turn) cannot tell a slow speaker's
"set the temperature to ..." from a finished command when the voice falls,
and hesitates over plain questions. The words can: a turn whose last word
needs another ("to", "and", "the", "can you", "twenty") is not finished
whatever it sounds like; one the profile's policy understands in full (a car
command with its slots, a question it has an answer for) or a wh-question is.
Everything else is left to the sound. English only, like the recognisers.

Recognisers punctuate almost everything they hear, fragments included
("Set the temperature to 20."), so a final full stop or question mark proves
nothing; a final comma or colon does say more is coming.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Words(Enum):
    FINISHED = "finished"
    UNFINISHED = "unfinished"
    UNSURE = "unsure"


@dataclass(frozen=True)
class WordsVerdict:
    kind: Words
    why: str  # e.g. "ends with 'to'", "understood", "a question"


# a turn rarely ends on these: articles and possessives, prepositions that need an object, conjunctions,
# fillers, a contraction left hanging. Words that often do end one are left out ("on", "in", "from", "that",
# "is", "do": "turn the radio on", "where are you from?", "repeat that", "what time it is", "what do you do?").
DANGLING = frozenset(
    """a an the my your our their his her its every
    to of for at with into onto than
    and or but because if whether although unless
    um uh er erm hmm mm
    i'm i'd i'll you're we're they're it's there's what's let's""".split()
)
_MODALS = frozenset("can could would will do did should shall may might must".split())
_TENS = frozenset("twenty thirty forty fifty sixty seventy eighty ninety hundred thousand point minus".split())
_TENS_DIGITS = re.compile(r"^[2-9]0$|^\d*00$")
_WH = frozenset("what what's when where where's who who's whom whose why which how how's".split())
# a question may end on its preposition ("what can you help me with?", "who is it for?")
_STRANDED = frozenset("to of for at with into onto".split())
# "what I want to know is ...", "the problem is ...": the copula after these waits for what it introduces
_CLEFT = frozenset(
    """know want need ask wonder say mean think like hope wanted needed asked wondered said meant thought hoped
    problem question thing point idea plan reason truth""".split()
)
_HANGING = (",", ":", ";", "-", "…")


def judge_words(text: str, understood: Callable[[str], bool] | None = None) -> WordsVerdict:
    """The words' verdict on `text`, the recogniser's transcript of the turn so far; `understood` says whether
    the profile's policy can act on it as it stands."""
    raw = text.strip()
    words = re.sub(r"[^a-z0-9' ]+", " ", raw.lower().replace("’", "'")).split()
    if not words:
        return WordsVerdict(Words.UNSURE, "nothing heard")
    if raw.endswith(_HANGING):
        return WordsVerdict(Words.UNFINISHED, f"ends with '{raw[-1]}'")
    last = words[-1]
    if last in _STRANDED and words[0] in _WH:
        return WordsVerdict(Words.UNSURE, "")  # "what is it for?", but also "what is the capital of ...": unsure
    if last in DANGLING:
        return WordsVerdict(Words.UNFINISHED, f"ends with '{last}'")
    if last in ("is", "was") and len(words) > 1 and words[-2] in _CLEFT:
        return WordsVerdict(Words.UNFINISHED, f"ends with '{words[-2]} {last}'")
    if last in ("you", "i", "we", "they") and len(words) > 1 and words[-2] in _MODALS:
        return WordsVerdict(Words.UNFINISHED, f"ends with '{words[-2]} {last}'")
    if last in _TENS or _TENS_DIGITS.match(last):
        return WordsVerdict(Words.UNFINISHED, "a number still being said")
    if understood is not None and understood(raw):
        return WordsVerdict(Words.FINISHED, "understood")
    if words[0] in _WH and raw.endswith("?") and len(words) >= 3:
        return WordsVerdict(Words.FINISHED, "a question")
    return WordsVerdict(Words.UNSURE, "")
