"""A second opinion on a request neither of Moonshine's readings made sense of: Whisper tiny.en hears it too.

Two recognisers trained apart mishear differently. Under road noise, Moonshine hears "Can you turn the air con
off?" as "Can you turn the air canal?" and "Slide the main roof open" as "Slide the miner of open", where
Whisper tiny.en (beam 5) hears "the air can off" and "the main roof". Where the assistant would act on
neither of Moonshine's readings (`second_reading.py`) and Moonshine was unsure of its words (at most `below`
log-likelihood a token: a request it heard clearly and has no skill for is answered at once), Whisper hears
the same audio, and its words are taken if the assistant acts on them and Moonshine finds them at most
`within` (natural log) less likely than its own: a bound against words written over what neither model could
make out. Only such a request waits for it (Whisper pads every input to 30 s: about 0.5 s here,
docs/benchmarks.md). Whisper learnt from subtitles, and over sounds it cannot make out it writes their
pleasantries ("Thank you very much.", "Bye."): a reading made of nothing else is never taken (`PLEASANTRY`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agent.profiles.understanding import normalise

if TYPE_CHECKING:
    from agent.engines.cascade.models import Recognizer
    from agent.engines.cascade.moonshine import Heard


# Words Whisper writes over what it could not make out; a reading of these alone is no request
PLEASANTRY = frozenset("thank thanks you very much so for watching bye goodbye cheers okay ok oh".split())


def pleasantry(text: str) -> bool:
    words = normalise(text).split()
    return bool(words) and all(w in PLEASANTRY for w in words)


@dataclass(frozen=True)
class SecondOpinion:
    other: Recognizer  # Whisper tiny.en: a recogniser trained apart from the one a session hears with
    within: float  # how much less likely Moonshine may find the other's words than its own (the config's)
    below: float  # asked only where Moonshine's reading was this sure or less (log-likelihood a token)

    def read(
        self, recognizer: Recognizer, heard: Heard, audio: np.ndarray, acts_on: Callable[[str], bool]
    ) -> tuple[Heard, bool]:
        """What to take the request for: `heard`, or the other recogniser's reading of `audio` where only that one
        is acted on (then True). `heard` must come from a `weighable` pass of `recognizer` over `audio`."""
        if not self.asks(heard, acts_on):
            return heard, False
        return self.hear(recognizer, heard, audio, acts_on)

    def asks(self, heard: Heard, acts_on: Callable[[str], bool]) -> bool:
        """Whether the other recogniser is asked: Moonshine was unsure of a reading not acted on."""
        sure = heard.sureness
        return sure is not None and sure <= self.below and not acts_on(heard.text)

    def hear(
        self, recognizer: Recognizer, heard: Heard, audio: np.ndarray, acts_on: Callable[[str], bool]
    ) -> tuple[Heard, bool]:
        """The other recogniser's reading of `audio` where it is acted on, is more than a pleasantry, and
        Moonshine finds it within bound (then True); else `heard`. `read` without the gate (`asks`)."""
        other = self.other.hear(audio)
        if not other.text or other.text == heard.text or pleasantry(other.text) or not acts_on(other.text):
            return heard, False
        gaps = recognizer.weigh(heard, [other.text], self.within)
        if gaps is None or gaps[0] > self.within:
            return heard, False
        return other, True
