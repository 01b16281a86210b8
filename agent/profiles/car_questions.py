"""Questions about how the car is ("Is the window open?", "Are the doors locked?"), answered from its state.

The grammar (`car_intents.parse`) reads a part and which way wherever the words stand, so a question about a
part was a command: "Is the window open?" opened it, "Are the seats heated?" turned the heating on. A yes/no
question that starts with the part it asks about is answered from the car's state instead, and changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from agent.profiles.car import WINDOW_GROUPS
from agent.profiles.car_intents import window_group, words_to_digits
from agent.profiles.dialog import normalise

# "is the ...", "are my ...": the part comes first; "is it possible to ...", "are you able to ..." are requests
_ASKS = re.compile(r"^(?:is|are) (?:the |my |our |all (?:of )?the |both (?:of )?the |any of the )?(?P<rest>.+)$")
_PARTS = (  # the part a question names in its first words, most specific first
    ("defrost", r"^(?:(?:front|rear|back) )?(?:defrost|defog|demist)\w*|^(?:rear|back) (?:window|windscreen) heat"),
    ("seat_heating", r"^(?:\w+'?s? )?(?:seats?|seat heat\w*)\b.*\b(?:heat|warm)\w*|^(?:heated|seat) seats?"),
    ("sunroof", r"^(?:sun ?roof|moon ?roof|roof)\b"),
    ("windows", r"^(?:(?:front|rear|back|left|right|driver'?s?|passenger'?s?) ){0,2}windows?\b"),
    ("doors", r"^(?:(?:front|rear|back) )?doors?\b|^car locked\b"),
    ("ac", r"^(?:ac|a c|air con\w*)\b"),
    ("fan", r"^(?:fan|blower)\b"),
    ("music", r"^(?:music|radio|song)\b"),
    ("volume", r"^volume\b"),
    ("temperature", r"^(?:temperature|heating|heater|climate)\b"),
    ("navigation", r"^(?:navigation|sat ?nav|gps|route|guidance)\b"),
)

# what the state says of a part: "is the window tinted" asks something else
_STATES = (
    r"\b(?:open|opened|closed|shut|up|down|cracked|locked|unlocked|on|off|running|working|going|playing|heated|"
    r"heating|warm|set|at|loud|quiet|high|low)\b"
)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _opened(name: str, position: int) -> str:
    if position == 0:
        return f"{name} is closed"
    return f"{name} is open" + ("" if position == 100 else f" {position} percent")


def _windows(rest: str, windows: dict[str, int]) -> str:
    """Which windows are open: of those the question names, or of all where it names none."""
    group = window_group(rest)
    if group == "driver" and "driver" not in rest:  # a command's default is the speaker's; a question's, all
        group = "all"
    open_ = [w for w in WINDOW_GROUPS[group] if windows[w]]
    if open_:
        return " ".join(f"The {_opened(w.replace('_', ' ') + ' window', windows[w])}." for w in open_)
    if group == "all":
        return "All the windows are closed."
    return f"The {group.replace('_', ' ')} window{'s are' if len(WINDOW_GROUPS[group]) > 1 else ' is'} closed."


def asked_about(text: str) -> tuple[str, str] | None:
    """The part a yes/no question starts with, and the question's words from it ("window open"); None when
    `text` is no such question."""
    m = _ASKS.match(words_to_digits(normalise(text)))
    if m is None:
        return None
    part = next((name for name, pattern in _PARTS if re.search(pattern, m.group("rest"))), None)
    return (part, m.group("rest")) if part is not None else None


def state_answer(asked: tuple[str, str], state: dict[str, Any]) -> str | None:
    """The answer to a question `asked_about` read, from `state` (`VehicleState.snapshot`); None where it asks
    what the state does not hold ("is the window tinted")."""
    part, rest = asked
    if not re.search(_STATES, rest):
        return None
    climate, media = state["climate"], state["media"]
    if part == "defrost":
        which = "rear" if re.search(r"\b(?:rear|back)\b", rest) else "front"
        return f"The {which} defrost is {_on(climate[f'defrost_{which}'])}."
    if part == "seat_heating":
        on = {seat: level for seat, level in state["seat_heating"].items() if level}
        if not on:
            return "Seat heating is off."
        return " ".join(f"The {seat.replace('_', ' ')} seat is heated at level {level}." for seat, level in on.items())
    if part == "sunroof":
        return f"The {_opened('sunroof', state['sunroof'])}."
    if part == "windows":
        return _windows(rest, state["windows"])
    if part == "doors":
        return "The doors are locked." if state["doors_locked"] else "The doors are unlocked."
    if part == "ac":
        return f"The air conditioning is {_on(climate['ac'])}."
    if part == "fan":
        return f"The fan is at level {climate['fan']}." if climate["fan"] else "The fan is off."
    if part == "music":
        playing = "playing" if media["playing"] else "not playing"
        return f"The {media['source']} is {playing}, at volume {media['volume']}."
    if part == "volume":
        return f"The volume is at {media['volume']}."
    if part == "temperature":
        zones = climate["temperature"]
        if len(set(zones.values())) == 1:
            return f"The temperature is set to {next(iter(zones.values())):g} degrees."
        return " ".join(f"The {zone} side is set to {value:g} degrees." for zone, value in zones.items())
    if part == "navigation":
        return f"Navigating to {state['destination']}." if state["destination"] else "No route is set."
    return None
