"""Whether words said over the agent's reply mean to interrupt it, by what they say rather than how many they are.

Counting words misjudges both ways: "Interesting, go on!" (a reaction, three words) stopped a reply and
"Louder, please." (two) would not, heard rightly. A classifier of the kind the assistants understand requests with
(`understanding.IntentModel`: words, letters in fours and the WordLlama sentence vector, all inside packages)
is trained on examples of both (`exemplars/interruptions.tsv`: reactions, acknowledgements and comments against
stops, corrections, questions and requests, written apart from every held-out phrase) and says how likely
the words are to be a barge-in. `media/turn_taking.py` decides with it (`InterruptionConfig.meant_from`).
"""

from __future__ import annotations

import threading

from agent.profiles.understanding import IntentModel, normalise
from agent.profiles.understanding import read_examples as read_intent_examples

BARGE_IN, BACKCHANNEL = "barge_in", "backchannel"
_lock = threading.Lock()
_model: IntentModel | None = None


def read_examples() -> list[tuple[str, str]]:
    return read_intent_examples("interruptions", shared=False)


def interruption_model() -> IntentModel:
    """Built once per process (under a second, once WordLlama is loaded), read-only afterwards."""
    global _model
    with _lock:
        if _model is None:
            _model = IntentModel(read_examples())
        return _model


def barge_in_probability(text: str) -> float | None:
    """How likely `text`, heard over the reply, is meant to interrupt it; None where it has no word to judge."""
    if not normalise(text):
        return None
    model = interruption_model()
    p = model.probabilities(text)
    return float(p[model.intents.index(BARGE_IN)])
