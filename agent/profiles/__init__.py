"""Profiles: what the agent is for (a general assistant, an in-car assistant, an interpreter).

The lowest agent layer above `media/`: it imports nothing from engines,
sessions or transports. Engines read a `Profile` for how turns are taken;
they never test a profile by its name. A profile's settings (its end-of-turn silence, its languages) are
in its YAML (`configs/<profile>.yaml`) and reach an engine session as its options, from one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    barge_in: bool = True  # the user's speech cuts the agent's reply
    # Interpreting: each segment the user says is rendered in another language, numbered, and queued behind the
    # one being spoken (none is cut off); transcripts carry the segment and its language.
    interpreting: bool = False
    vehicle: bool = False  # the agent drives a car through its tools (agent/profiles/car.py)


PROFILES: dict[str, Profile] = {
    "default": Profile("default"),
    "in_car": Profile("in_car", vehicle=True),
    "translate": Profile("translate", barge_in=False, interpreting=True),
}
NAMES = tuple(PROFILES)


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(NAMES)}") from None
