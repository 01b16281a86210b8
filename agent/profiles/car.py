"""The vehicle: its state, and the tools that are the only way to change it.

Every change is validated (ranges, units, which windows and seats exist) and
returns a result: what changed, or a specific reason why nothing did. The
same tool definitions are offered to a language model as functions.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

WINDOWS = ("front_left", "front_right", "rear_left", "rear_right")
WINDOW_GROUPS = {
    "all": WINDOWS,
    "front": ("front_left", "front_right"),
    "rear": ("rear_left", "rear_right"),
    "left": ("front_left", "rear_left"),
    "right": ("front_right", "rear_right"),
    "driver": ("front_left",),
    "passenger": ("front_right",),
    **{w: (w,) for w in WINDOWS},
}
SEATS = ("driver", "passenger", "rear_left", "rear_right")
ZONES = ("driver", "passenger")
SOURCES = ("radio", "bluetooth", "usb")
TEMP_MIN, TEMP_MAX = 16.0, 30.0
FAN_MAX, HEAT_MAX, VOLUME_MAX = 7, 3, 30


def _say(name: str) -> str:
    return name.replace("_", " ")


class ToolError(ValueError):
    """A request the car cannot do; the message is said to the user."""


@dataclass
class Climate:
    temperature: dict[str, float] = field(default_factory=lambda: {z: 21.0 for z in ZONES})
    fan: int = 2
    ac: bool = False
    defrost_front: bool = False
    defrost_rear: bool = False


@dataclass
class Media:
    playing: bool = False
    volume: int = 10
    source: str = "radio"


@dataclass
class VehicleState:
    windows: dict[str, int] = field(default_factory=lambda: {w: 0 for w in WINDOWS})
    sunroof: int = 0
    climate: Climate = field(default_factory=Climate)
    seat_heating: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SEATS})
    media: Media = field(default_factory=Media)
    destination: str | None = None
    doors_locked: bool = True

    def snapshot(self) -> dict[str, Any]:
        return asdict(self)


def _num(args: dict[str, Any], key: str) -> float:
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"I need a number for the {_say(key)}.")
    return float(value)


def _percent(value: float, what: str) -> int:
    if not 0 <= value <= 100:
        raise ToolError(f"The {what} can only be 0 to 100 percent open, not {value:g}.")
    return round(value)


def _choice(
    args: dict[str, Any], key: str, options: tuple[str, ...] | dict[str, Any], what: str, names: str = ""
) -> str:
    value = args.get(key)
    if value not in options:
        names = names or ", ".join(_say(o) for o in options)
        raise ToolError(f"There is no {_say(str(value))} {what}; {names}.")
    return value


class Car:
    """One vehicle per session. `call` is the only door to its state."""

    def __init__(self) -> None:
        self.state = VehicleState()

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run a tool; returns {"ok", "message", "state"}. A refused call changes nothing."""
        handler = getattr(self, f"_tool_{name}", None)
        if handler is None or not isinstance(arguments, dict):
            return {"ok": False, "message": f"I can't do {_say(name)}.", "state": self.state.snapshot()}
        before = copy.deepcopy(self.state)
        try:
            message = handler(arguments)
        except ToolError as exc:
            self.state = before
            return {"ok": False, "message": str(exc), "state": self.state.snapshot()}
        return {"ok": True, "message": message, "state": self.state.snapshot()}

    # ---- tools ----

    def _tool_get_vehicle_state(self, args: dict[str, Any]) -> str:
        return "Here is the car's state."

    def _tool_set_window(self, args: dict[str, Any]) -> str:
        group = _choice(
            args,
            "window",
            WINDOW_GROUPS,
            "window",
            "the car has front left, front right, rear left and rear right windows, and a sunroof",
        )
        pos = _percent(_num(args, "position"), "windows")
        for w in WINDOW_GROUPS[group]:
            self.state.windows[w] = pos
        which = (
            "all the windows"
            if group == "all"
            else f"the {_say(group)} window" + ("s" if len(WINDOW_GROUPS[group]) > 1 else "")
        )
        if pos == 0:
            return f"Closing {which}."
        return f"Opening {which}" + (" all the way." if pos == 100 else f" to {pos} percent.")

    def _tool_set_sunroof(self, args: dict[str, Any]) -> str:
        pos = _percent(_num(args, "position"), "sunroof")
        self.state.sunroof = pos
        return "Closing the sunroof." if pos == 0 else f"Opening the sunroof to {pos} percent."

    def _zones(self, args: dict[str, Any]) -> tuple[str, ...]:
        zone = args.get("zone", "all")
        if zone == "all":
            return ZONES
        return (_choice(args, "zone", ZONES, "climate zone"),)

    def _set_temp(self, zones: tuple[str, ...], value: float) -> str:
        if not TEMP_MIN <= value <= TEMP_MAX:
            raise ToolError(
                f"I can't set the temperature to {value:g} degrees; it goes from {TEMP_MIN:g} to {TEMP_MAX:g}."
            )
        value = round(value * 2) / 2
        for z in zones:
            self.state.climate.temperature[z] = value
        where = "" if len(zones) > 1 else f" on the {zones[0]} side"
        return f"Setting the temperature{where} to {value:g} degrees."

    def _tool_set_temperature(self, args: dict[str, Any]) -> str:
        return self._set_temp(self._zones(args), _num(args, "celsius"))

    def _tool_adjust_temperature(self, args: dict[str, Any]) -> str:
        zones = self._zones(args)
        delta = _num(args, "delta")
        if not -5 <= delta <= 5 or delta == 0:
            raise ToolError("I change the temperature by up to 5 degrees at a time.")
        current = max(self.state.climate.temperature[z] for z in zones)
        target = current + delta
        if not TEMP_MIN <= target <= TEMP_MAX:
            edge = "warmest" if delta > 0 else "coolest"
            raise ToolError(
                f"It is already at {current:g} degrees, the {edge} I can go is {TEMP_MAX if delta > 0 else TEMP_MIN:g}."
            )
        self._set_temp(zones, target)
        return f"Making it {'warmer' if delta > 0 else 'cooler'}: {target:g} degrees."

    def _tool_set_fan(self, args: dict[str, Any]) -> str:
        level = _num(args, "level")
        if level != int(level) or not 0 <= level <= FAN_MAX:
            raise ToolError(f"The fan goes from 0 to {FAN_MAX}, not {level:g}.")
        self.state.climate.fan = int(level)
        return "Turning the fan off." if level == 0 else f"Fan at level {int(level)}."

    def _tool_set_ac(self, args: dict[str, Any]) -> str:
        on = bool(args.get("on"))
        self.state.climate.ac = on
        return f"Air conditioning {'on' if on else 'off'}."

    def _tool_set_defrost(self, args: dict[str, Any]) -> str:
        which = _choice(args, "which", ("front", "rear"), "defroster")
        on = bool(args.get("on"))
        setattr(self.state.climate, f"defrost_{which}", on)
        return f"{which.capitalize()} defrost {'on' if on else 'off'}."

    def _tool_set_seat_heating(self, args: dict[str, Any]) -> str:
        seat = _choice(args, "seat", SEATS, "seat", "the heated seats are driver, passenger, rear left and rear right")
        level = _num(args, "level")
        if level != int(level) or not 0 <= level <= HEAT_MAX:
            raise ToolError(f"Seat heating goes from 0 to {HEAT_MAX}, not {level:g}.")
        self.state.seat_heating[seat] = int(level)
        if level == 0:
            return f"Seat heating off for the {_say(seat)} seat."
        return f"Seat heating on for the {_say(seat)} seat, level {int(level)}."

    def _tool_media(self, args: dict[str, Any]) -> str:
        action = _choice(args, "action", ("play", "pause", "next", "previous"), "media action")
        m = self.state.media
        if action == "play":
            m.playing = True
            return f"Playing {m.source}."
        if action == "pause":
            m.playing = False
            return "Paused."
        m.playing = True
        return "Next track." if action == "next" else "Previous track."

    def _tool_set_volume(self, args: dict[str, Any]) -> str:
        level = _num(args, "level")
        if level != int(level) or not 0 <= level <= VOLUME_MAX:
            raise ToolError(f"The volume goes from 0 to {VOLUME_MAX}, not {level:g}.")
        self.state.media.volume = int(level)
        return f"Volume {int(level)}."

    def _tool_adjust_volume(self, args: dict[str, Any]) -> str:
        delta = _num(args, "delta")
        target = min(VOLUME_MAX, max(0, self.state.media.volume + int(delta)))
        if target == self.state.media.volume:
            raise ToolError(f"The volume is already at {'its highest' if delta > 0 else 'its lowest'}.")
        self.state.media.volume = target
        return f"Volume {'up' if delta > 0 else 'down'} to {target}."

    def _tool_set_media_source(self, args: dict[str, Any]) -> str:
        source = _choice(args, "source", SOURCES, "media source")
        self.state.media.source = source
        return f"Switching to {source}."

    def _tool_navigate(self, args: dict[str, Any]) -> str:
        dest = args.get("destination")
        if not isinstance(dest, str) or not dest.strip() or len(dest) > 200:
            raise ToolError("Where to? I need a destination.")
        self.state.destination = dest.strip()
        return f"Starting navigation to {self.state.destination}."

    def _tool_cancel_navigation(self, args: dict[str, Any]) -> str:
        if self.state.destination is None:
            raise ToolError("There is no navigation running.")
        self.state.destination = None
        return "Navigation cancelled."

    def _tool_lock_doors(self, args: dict[str, Any]) -> str:
        locked = bool(args.get("locked", True))
        self.state.doors_locked = locked
        return "Doors locked." if locked else "Doors unlocked."


def _enum(values: tuple[str, ...] | dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


def _int(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _fn(name: str, description: str, **props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


# The same tools as function definitions, for a model that calls tools (Qwen3-Omni).
TOOLS: list[dict[str, Any]] = [
    _fn(
        "set_window",
        "Open or close windows; position 0 (closed) to 100 (fully open) percent.",
        window=_enum(WINDOW_GROUPS),
        position=_int(0, 100),
    ),
    _fn("set_sunroof", "Open or close the sunroof, 0 to 100 percent.", position=_int(0, 100)),
    _fn(
        "set_temperature",
        "Set the cabin temperature in degrees Celsius (16 to 30).",
        zone=_enum(("all", *ZONES)),
        celsius={"type": "number", "minimum": TEMP_MIN, "maximum": TEMP_MAX},
    ),
    _fn(
        "adjust_temperature",
        "Make it warmer (positive) or cooler (negative), in degrees.",
        zone=_enum(("all", *ZONES)),
        delta={"type": "number", "minimum": -5, "maximum": 5},
    ),
    _fn("set_fan", "Fan speed, 0 (off) to 7.", level=_int(0, FAN_MAX)),
    _fn("set_ac", "Turn the air conditioning on or off.", on={"type": "boolean"}),
    _fn("set_defrost", "Front or rear defrost on or off.", which=_enum(("front", "rear")), on={"type": "boolean"}),
    _fn("set_seat_heating", "Seat heating level 0 (off) to 3.", seat=_enum(SEATS), level=_int(0, HEAT_MAX)),
    _fn("media", "Play, pause, next or previous track.", action=_enum(("play", "pause", "next", "previous"))),
    _fn("set_volume", "Volume 0 to 30.", level=_int(0, VOLUME_MAX)),
    _fn("adjust_volume", "Volume up (positive) or down (negative).", delta=_int(-30, 30)),
    _fn("set_media_source", "Radio, bluetooth or USB.", source=_enum(SOURCES)),
    _fn("navigate", "Start navigation to a destination.", destination={"type": "string"}),
    _fn("cancel_navigation", "Stop navigation."),
    _fn("lock_doors", "Lock (true) or unlock (false) the doors.", locked={"type": "boolean"}),
]
