"""A second reading of a request the assistant could not act on, leaning toward the words it knows.

Moonshine hears "Can you open the roof?" said by a voice unlike its training as "Can you open the loop?", and
"Turn the heating down" as "Join the healing town": the assistant, given those words, says it cannot help or
asks back. Where the first reading is one it would not act on, the same encoded audio is decoded again with
the recogniser leaning toward the assistant's vocabulary (`phrase_bias.py`); the second reading is taken only
if the assistant acts on it and the model itself finds it at most `within` (natural log) less likely than the
first. Leaning always (on every pass) helped as often as it hurt; this way a reading the assistant acts on is
never changed. Bonus and bound were chosen on the examples (`python -m benchmarks.phrase_bias`), measured on
the corpora (`benchmarks/understanding.py --spoken`): docs/benchmarks.md; set in the config (`understanding`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.engines.cascade.models import Recognizer
    from agent.engines.cascade.moonshine import Heard
    from agent.engines.cascade.phrase_bias import PhraseBias


@dataclass(frozen=True)
class SecondReading:
    bias: PhraseBias
    within: float  # how much less likely than the first reading (natural log) the second may be (the config's)

    def read(self, recognizer: Recognizer, heard: Heard, acts_on: Callable[[str], bool]) -> tuple[Heard, bool]:
        """What to take the request for: `heard`, or the second reading where only that one is acted on (then
        True). `heard` must come from a `weighable` pass (the encoding is read again, not redone)."""
        if not heard.text or acts_on(heard.text):
            return heard, False
        again = recognizer.rehear(heard, self.bias)
        if again is None or not again.text or again.text == heard.text:
            return heard, False
        if heard.log_prob - again.log_prob > self.within or not acts_on(again.text):
            return heard, False
        return again, True
