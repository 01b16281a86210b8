"""Which of CLINC150's intents are an offline assistant's own, which are no skill of its, which are unclear.

CLINC150 (`benchmarks/clinc150.py`) is 150 intents of a general assistant, written by crowd workers. Its
requests for what neither assistant does (a bank balance, a recipe, a timer, the weather, a joke) teach the
intent model what "none" looks like far more widely than the examples written here; the few that are an
assistant's own skills teach those skills in strangers' words. Left out, as neither: requests whose answer
depends on what came before ("yes", "cancel", "repeat": what the assistant said, where `repeat_last` is the
user's words), and for the car a home's thermostat or lights, and the assistant whispering, which the car's
tools come near.
"""

from __future__ import annotations

NONE = "none"  # `understanding.NONE`, which reads these (this module imports nothing of it: no cycle)

# CLINC150's intent -> the intent model's, per profile; an intent not named is out of scope (NONE)
_SHARED = {
    "time": "time",
    "date": "date",
    "what_can_i_ask_you": "help",
    "greeting": "greet",
    "goodbye": "bye",
    "thank_you": "thanks",
}
INTENTS = {
    "default": _SHARED,
    "car": _SHARED | {"directions": "navigate", "play_music": "music", "change_volume": "volume", "next_song": "track"},
}
UNCLEAR = {
    "default": {"repeat", "yes", "no", "maybe", "cancel"},
    "car": {"repeat", "yes", "no", "maybe", "cancel", "smart_home", "whisper_mode"},
}


def intent_of(profile: str, clinc: str) -> str | None:
    """The intent model's intent for a CLINC150 request in `profile` ("default" or "car"), NONE where no skill
    answers it, None where that is unclear."""
    if clinc in UNCLEAR[profile]:
        return None
    return INTENTS[profile].get(clinc, NONE)
