"""Spoken car commands to tool calls: a small grammar over recognised text.

It copes with the usual ways of saying things ("open the front window",
"passenger window down halfway", "make it warmer", "set the temperature to
21 degrees", "turn on the seat heating for the driver"). What it maps is then
validated by the Car like any other tool call, so a request the car cannot do
("the fifth window", "90 degrees") is refused with a reason, not guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agent.profiles.car import FAN_MAX
from agent.profiles.dialog import normalise

_UNITS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_ORDINALS = ("third", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "middle", "top", "bottom", "roof")


@dataclass
class Command:
    tool: str
    arguments: dict[str, Any]


def words_to_digits(text: str) -> str:
    """'twenty one' -> '21', 'one hundred' -> '100', 'point five' -> '.5', 'and a half' -> '.5'; leaves the rest."""
    out: list[str] = []
    tokens = text.split()
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in _TENS:
            value = _TENS[t]
            if i + 1 < len(tokens) and tokens[i + 1] in _UNITS and 0 < _UNITS[tokens[i + 1]] < 10:
                value += _UNITS[tokens[i + 1]]
                i += 1
            out.append(str(value))
        elif t in _UNITS and not (t == "one" and out and out[-1] in ("the", "this", "that")):
            if i + 1 < len(tokens) and tokens[i + 1] == "hundred":
                out.append(str(_UNITS[t] * 100))
                i += 1
            else:
                out.append(str(_UNITS[t]))
        elif t == "hundred":
            out.append("100")
        else:
            out.append(t)
        i += 1
    text = " ".join(out)
    text = re.sub(r"(\d+) point (\d+)", r"\1.\2", text)
    return re.sub(r"\b(\d+) and a half\b", r"\1.5", text)


def _number(text: str, after: str = "") -> float | None:
    m = re.search(rf"{after}\s*(-?\d+(?:\.\d+)?)", text) if after else re.search(r"(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


_SWITCH_OFF = r"\b(?:off|disabled?|stop|deactivated?|no more|close|shut)\b"
_SWITCH_ON = r"\b(?:on|enable|start|activate|going)\b"


def _on_off(text: str) -> bool | None:
    text = _commanded(text, f"{_SWITCH_OFF}|{_SWITCH_ON}")
    if re.search(_SWITCH_OFF, text):
        return False
    if re.search(_SWITCH_ON, text):
        return True
    return None


def window_group(text: str) -> str:
    if m := re.search(rf"\b({'|'.join(_ORDINALS)})\b", text):
        return m.group(1)
    front = re.search(r"\bfront\b", text)
    rear = re.search(r"\brear\b|\bback\b(?! up| down)", text)  # "put it back up" is no rear window
    left = re.search(r"\bleft\b", text)
    right = re.search(r"\bright\b", text)
    if re.search(r"\b(?:all|every|both)\b", text) and not (front or rear):
        return "all"
    if (front or rear) and (left or right):
        return f"{'front' if front else 'rear'}_{'left' if left else 'right'}"
    if front:
        return "front"
    if rear:
        return "rear"
    if re.search(r"\bpassenger'?s?\b", text):
        return "passenger"
    if re.search(r"\bwindows\b|\b(?:roll|wind) (?:them|'?em)\b", text):
        return "all"
    return "driver"  # "open the window": the one by the person speaking


def _amount(text: str, opening: bool) -> float:
    """How far open (0-100) from the words: a share, halfway, a little; else all the way. "A bit" said of how
    things are ("it's a bit loud, close the roof") is not how far."""
    text = re.sub(r"\b(?:it's|it is|that's|s|is|getting|feels?)\s+(?:a bit|a little)\b", " ", text)
    pct = _number(text, r"\b(?:to|at|by)?") if re.search(r"\d+\s*(?:percent|%)", text) else None
    if pct is not None:
        return pct if opening else 100 - pct
    if re.search(r"\bhalf ?way\b|\bhalf\b", text):
        return 50
    if re.search(r"\b(?:a bit|a little|slightly|a crack|crack)\b", text):
        return 25 if opening else 75
    return 100 if opening else 0


# music asked to be put on ("put some tunes on"), not put on hold or pause
MUSIC_ON = (
    r"(?:put|stick|chuck|throw|turn|switch|get) (?:some |the |a bit of )?(?:music|tunes|songs?) on\b"
    r"(?! (?:hold|pause|mute|repeat|shuffle|loop)\b)"
)


def _read(raw: str) -> str:
    """`raw` as the grammar reads it: normalised, numbers in digits, less the weather ("it's 30 degrees out" is
    no setting)."""
    return re.sub(r"\b\d+(?:\.\d+)? (?:degrees? )?out(?:side)?\b", " ", words_to_digits(normalise(raw)))


def parse(raw: str, state: dict[str, Any]) -> Command | None:
    """The tool call a sentence asks for, or None when it is not a car command."""
    text = _read(raw)
    text = re.sub(r"\b(?:a c|air conditioning|air conditioner|air condition|air con)\b", "ac", text)
    # defrost first: "defrost the rear window" is not about opening it
    if re.search(r"\b(?:defrost|defog|demist)|\b(?:steamed|fogged|misted) up\b|\bfoggy\b", text):
        return Command(
            "set_defrost",
            {"which": "rear" if re.search(r"\b(?:rear|back)\b", text) else "front", "on": _on_off(text) is not False},
        )
    # windows and sunroof
    if re.search(_ROOF, text):
        opening = not re.search(_SHUT, _commanded(text))
        return Command("set_sunroof", {"position": _amount(text, opening)})
    if re.search(
        r"\bwindows?\b|\b(?:roll|wind) (?:it |them |'?em |that |mine |yours )?(?:back )?(?:up|down)\b|"
        r"\b(?:front|rear|back) (?:left|right|passenger|driver'?s?)(?: one| side)?\b(?!.*\bseats?\b)",
        text,
    ):
        opening = _opening(text)
        return Command("set_window", {"window": window_group(text), "position": _amount(text, opening)})
    # climate
    zone = _zone(text)
    if re.search(_SEAT_HEAT, text):
        return _seat_heating(text, state)
    if re.search(r"\bac\b|\bcooling\b", text):
        if (celsius := _setting(text)) is not None:
            return Command("set_temperature", {"zone": zone, "celsius": celsius})  # "put the aircon on 22"
        if (on := _on_off(text)) is not None:
            return Command("set_ac", {"on": on})
    if re.search(r"\bfans?\b", text):
        return Command("set_fan", {"level": _fan_level(text, state)})
    if (by := _degrees_by(text)) is not None:  # "bump the temperature up two degrees", "drop it by three degrees"
        return Command("adjust_temperature", {"zone": zone, "delta": by})
    if re.search(_TEMPERATURE, text) and (to := _number(text, r"\bto")) is not None:  # "lower the heat to 19"
        return Command("set_temperature", {"zone": zone, "celsius": _celsius(to, text)})
    change = _number(text, _BY) or _number(text, r"\b(?:raise|increase|lower|drop|reduce|decrease)\b.*?")
    temperature = re.search(_TEMPERATURE, text)
    if re.search(_FEEL_COLD, text) or (temperature and re.search(r"\b(?:raise|increase)\b", text)):
        return Command("adjust_temperature", {"zone": zone, "delta": change or 1})
    if re.search(_FEEL_HOT, text) or (temperature and re.search(r"\b(?:lower|drop|reduce|decrease)\b", text)):
        return Command("adjust_temperature", {"zone": zone, "delta": -(change or 1)})
    if re.search(rf"{_TEMPERATURE}|\b(?:degrees|climate)\b", text):
        value = _number(text)
        if value is not None:
            return Command("set_temperature", {"zone": zone, "celsius": _celsius(value, text)})
    if re.search(r"\bcabin\b", text) and (celsius := _setting(text)) is not None:  # "set the cabin to 19"
        return Command("set_temperature", {"zone": zone, "celsius": celsius})
    # media: music asked for is played, whatever else is said of how quiet it is
    if re.search(rf"\b{MUSIC_ON}|\bsomething to listen to\b", text):
        return Command("media", {"action": "play"})
    if re.search(
        r"\b(?:volume|louder|quieter|quieten|softer|too loud|too quiet)\b|\b(?:music|radio|sound) (?:up|down)\b",
        text,
    ):
        return _volume(text)
    if m := re.search(r"\b(?:switch|change|go) to (?:the )?(radio|bluetooth|usb)\b", text):
        return Command("set_media_source", {"source": m.group(1)})
    if re.search(
        r"\b(?:next|skip|previous|last)\b.*\b(?:song|track|one|1)\b|^(?:next|skip)\b|\bgo back a (?:song|track)\b|"
        r"\b(?:pause|stop|freeze|hold|halt)\b.*\b(?:music|song|track|radio|playback|media|tunes)\b|^pause\b|"
        r"\b(?:music|song|track|radio|tunes) on hold\b|"
        r"\bpaused? (?:it|that|this)\b|"
        r"\b(?:play|resume)\b|"
        r"\b(?:listen to|put on|putting on|stick on|fancy|in the mood for)\b.*\b(?:music|songs?|tunes|playlist|album|"
        r"jazz|rock|pop|classical|"
        r"country|hip hop|rap|blues|reggae|bollywood|metal|disco|folk)\b",
        text,
    ):
        return Command("media", {"action": _media_action(text)})
    # navigation and doors
    if re.search(
        r"\b(?:cancel|stop|end|no more|kill)\b.*\b(?:navigation|navigating|route|directions|guidance|turn by turn|"
        r"sat nav)\b",
        text,
    ):
        return Command("cancel_navigation", {})
    if m := re.search(
        r"\b(?:navigate|take me|directions|drive me|route me|route|drive|get me|how do i get|guide me|destination)"
        r" (?:to|is) (?:the )?(.+)$",
        raw.strip(),
        re.I,
    ):
        return Command("navigate", {"destination": m.group(1).strip(" .!?")})
    if m := re.search(r"\b(?:take|drive|get) me (home|to work)\b", text):
        return Command("navigate", {"destination": m.group(1).removeprefix("to ")})
    if re.search(_UNLOCK, text):
        return Command("lock_doors", {"locked": False})
    if re.search(r"\block\b.*\b(?:doors?|car)\b", text):
        return Command("lock_doors", {"locked": True})
    return None


_SEAT_HEAT = (
    r"\b(?:seat heat|heated seat|seat warm|warm my seat|heat my seat|seat heater)|"
    r"\bseat'?s?\b.*\b(?:hot|warm|cold|heat)|\b(?:heat|warm)\w*\b.*\bseat"
)
_TEMPERATURE = r"\b(?:temperature|temp|heat|heating|thermostat)\b"
_FEEL_COLD = (
    r"\b(?:warmer(?! than)|hotter(?! than)|heat it up|warm it up|too cold|i'm cold|i am cold|freezing|chilly|chilled|"
    r"baltic|icebox|shivering|less cold|cold in here|colder than|cold as)\b"
)
_FEEL_HOT = (
    r"\b(?:cooler(?! than)|colder(?! than)|cool it down|too hot|too warm|i'm hot|i am hot|boiling|roasting|sweating|"
    r"sweltering|baking|hot in here|less hot|turn down the heat|hotter than|warmer than|hot as)\b"
)
_ROOF = r"\b(?:sun ?roof|moon ?roof|roof(?! (?:rack|box|bars?)))\b"
_SHUT = r"\b(?:close[ds]?|closing|shuts?|shutting|seal)\b"
_CLOSE = rf"{_SHUT}|\b(?:up|raise|windy|draughty|drafty|cold air|rain|raining|pouring)\b"
_OPEN = r"\b(?:open|opened|opening|down|doon|lower|lowering|crack|let|drop|slide|pop|retract|tilt|fresh air)\b"


_WHICH_WAY = f"{_OPEN}|{_CLOSE}"


def says_which_way(text: str) -> bool:
    """Whether `text` says which way a window or the roof goes: without it, it opens (`_opening`)."""
    return bool(re.search(_WHICH_WAY, normalise(text)))


def _zone(text: str) -> str:
    if re.search(r"\b(?:driver'?s?|my side)\b", text):
        return "driver"
    return "passenger" if re.search(r"\bpassenger'?s?\b", text) else "all"


def _seat(text: str) -> str:
    if m := re.search(r"\b(?:rear|back) (left|right)\b", text):
        return f"rear_{m.group(1)}"
    if re.search(r"\b(?:third|middle|fifth) seat\b", text):
        return "middle"
    return "passenger" if re.search(r"\bpassenger", text) else "driver"


def _opening(text: str) -> bool:
    """A window or roof opens unless told to close: "open up the roof" opens, "put it back up" closes; a verb
    says more than a particle ("it's chucking it down, shut the windows")."""
    text = _commanded(text)
    if re.search(_SHUT, text) and not re.search(r"\b(?:open|opening)\b", text):
        return False
    return bool(re.search(_OPEN, text)) or not re.search(_CLOSE, text)


# How a part is, said before what to do with it: "the back window is still open, close it" ("it's", "the
# window's": the "s" after the apostrophe)
_STATE = (
    r"\b(?:is|are|was|were|s|been|they're)\s+(?:still\s+|all\s+(?:the\s+way\s+)?|wide\s+|half\s+|left\s+)?"
    r"(?:open|opened|closed|shut|down|up|on|off)\b"
)


# A change of mind: "open the, sorry, close the front windows"
_CORRECTION = r"\b(?:sorry|i mean|no wait|wait no|scratch that|actually no|no no|or rather)\b"


def _commanded(text: str, which_way: str = _WHICH_WAY) -> str:
    """`text` from its last change of mind on, then from its last "can you" on (what comes before it says how
    things are), each where that still says `which_way`; less what it says of a part's state ("is still open",
    "the compressor's off") where other words still say `which_way`: the state alone is taken as it was ("the
    window's open")."""
    latest = re.split(_CORRECTION, text)[-1]
    text = latest if re.search(which_way, latest) else text
    asked = re.split(r"\b(?:can|could|would|will) you\b", text)[-1]  # "... with that window open, can you close it"
    text = asked if re.search(which_way, asked) else text
    rest = re.sub(_STATE, " ", text)
    return rest if re.search(which_way, rest) else text


_OFF = r"\b(?:off|disabled?|stop|cancel|deactivated?|no more|too hot|too warm|enough|kill|cut)\b"
# Which way, wherever the words stand: "that's way too loud" is down, "dial it back" is less
_LESS = (
    r"\b(?:down|lower|lowering|lowest|less|decrease|decreasing|reduce|reducing|drop|quieter|quieten|soften|softer|"
    r"gentle|gentler|weaker|slow|slower|minimum|"
    r"too loud|too strong|too much|too noisy|so loud|very loud|really loud|deafening|my ears|blasting|"
    r"dial (?:it |that )?back|ease off|back off|tone (?:it |that )?down|not so loud|"
    r"quiet (?:it|that|this|the|things|down))\b"  # "quiet the music", not "it's too quiet"
)
_UNLOCK = (
    r"\bunlock|\b(?:release|undo|disengage|take off|pop|switch off|turn off|disable)\b.*\block(?:s|ing)?\b|"
    r"\blocking off\b"
)  # "release the central locking"
_HOT = (
    r"\b(?:hot|boiling|warm in here|sweating|sweaty|stuffy|stifling|roasting|baking|cooking|melting|sauna|oven|"
    r"cooler|colder|cool|fresher|lower|down|reduce|less)\b"
)
_COLD = (
    r"\b(?:cold|chilly|chilled|baltic|the chill|nippy|freezing|frozen|ice|icy|numb|my breath|shivering|toasty|"
    r"toastier|warmer|hotter|heat|warm up|raise|up|increase|more)\b"
)
_HEAT_LEVELS = {"high": 3, "max": 3, "maximum": 3, "full": 3, "medium": 2, "low": 1, "little": 1, "bit": 1}


def _seat_heating(text: str, state: dict[str, Any]) -> Command:
    """A seat's heating from the words (the grammar's and a topic's alike): off, the level given or named, one
    down where less is asked ("lower the heat on my seat"), else 2."""
    seat = _seat(text)
    level = _number(text, r"\b(?:level|to)")
    if re.search(_OFF, text):
        level = 0
    elif level is None:
        named = next((v for w, v in _HEAT_LEVELS.items() if re.search(rf"\b{w}\b", text)), None)
        less = max(0, state["seat_heating"].get(seat, 0) - 1) if re.search(_LESS, text) else 2
        level = less if named is None else named
    return Command("set_seat_heating", {"seat": seat, "level": level})


_STEPS = r"\s*(?:levels?|notch(?:es)?|steps?|settings?|speeds?)\b"
# A number said as how far, not where to: "by two", "by like three", "two notches", "a notch or two", "up 3"
_BY = r"\bby(?: like| about| around| maybe| another)?"
_OR_SO = r"\ba (?:notch|step|level|click|bit) or"
_UP_DOWN_BY = r"\b(?:up|down|higher|lower|louder|quieter)"
_TEMPERATURE_WORDS = rf"{_TEMPERATURE}|\b(?:degrees?|warmer|cooler|colder|hotter)\b"
_UP = r"\b(?:up|raise|increase|bump|higher|more|warmer|hotter)\b"
_DOWN = r"\b(?:down|lower|drop|reduce|decrease|less|cooler|colder)\b"


def _fan_level(text: str, state: dict[str, Any]) -> int | float:
    """The fan's level from the words (the grammar's and a topic's alike): off; the lowest or highest; a number
    of steps up or down ("up two levels", "down by one"); the level given; else one step either way."""
    current = state["climate"]["fan"]
    less = bool(re.search(_LESS, text))
    if _on_off(text) is False:
        return 0
    if re.search(r"\b(?:lowest|minimum|min|low)\b", text):
        return 1
    if re.search(r"\b(?:medium|middle|mid)\b", text):
        return (FAN_MAX + 1) // 2
    if re.search(r"\b(?:highest|maximum|max|full(?: blast)?|top)\b", text):
        return FAN_MAX
    steps = _steps(text)
    if steps is not None:
        return max(0, min(FAN_MAX, current - steps if less else current + steps))
    level = _number(text)
    if level is not None:
        return level
    return max(0, current - 1) if less else current + 1


# Which way the music goes, wherever the words stand: "skip back" and "the one before this" go back, "not this
# one again, skip it" goes on, "freeze the track" and "hold the song" pause
_BACK = (
    r"\b(?:previous|back(?! on\b)|earlier|before|replay|rewind|return|last (?:one|1|song|track|tune)|"
    r"restart (?:this|the|that)|from the (?:beginning|start|top)|start (?:\w+ ){0,2}over)\b"
)
_ON = r"\b(?:next|skip|skipping|forward|following|another|different|change|after (?:this|that)(?: one)?)\b"
# A track disliked is a track skipped ("I'm sick of this song"); one liked, or only named, is no command
_DISLIKE = r"\b(?:don't like|do not like|hate|sick of|tired of|awful|terrible|rubbish|boring|can't stand|enough of)\b"
# ... and one praised asks nothing of the car ("I love this song", "this song is great"): out of scope (in_car)
LIKED = re.compile(r"\b(?:love|loving|like|great|good|catchy|brilliant|amazing|awesome|banger|favou?rite|nice)\b")
_PAUSE = r"\b(?:paused?|stop|hold|freeze|halt|mute|silence|off|enough|shh+|kill|cut)\b"


def _media_action(text: str, otherwise: str | None = "play") -> str | None:
    """next, previous, pause or play from the words (the grammar's and a topic's alike); `otherwise` where
    none of them says."""
    if re.search(_BACK, text):
        return "previous"
    if re.search(_ON, text):
        return "next"
    if re.search(r"\b(?:resume|unpause)\b", text):  # "resume it where I left off", "resume it again"
        return "play"
    if re.search(r"\bagain\b", text):  # "play that again"; "start the music again" plays on
        return "play" if re.search(r"\b(?:start|restart)\b", text) else "previous"
    if re.search(_PAUSE, text) and not re.search(r"\b(?:don't|do not|never) stop\b", text):
        return "pause"
    if re.search(r"\b(?:play|start)\b", text):
        return "play"
    return otherwise


def _setting(text: str) -> float | None:
    """A number that can only be a cabin temperature (16-32 °C, 60-90 °F), not a level or a share."""
    value = _number(text)
    if value is None or re.search(r"\d\s*(?:percent|%|levels?|notch|steps?)", text):
        return None
    return _celsius(value, text) if 16 <= value <= 32 or 60 <= value <= 90 else None


def _celsius(value: float, text: str) -> float:
    """A temperature as the car sets it: a number of 50 or more is Fahrenheit ("keep it at 70") unless Celsius
    is said, to the half degree."""
    if re.search(r"\bfahrenheit\b", text) or (value >= 50 and not re.search(r"\b(?:celsius|centigrade)\b", text)):
        return round((value - 32) * 5 / 9 * 2) / 2
    return value


def _volume(text: str) -> Command:
    """The volume from the words (the grammar's and a topic's alike): up or down by so many ("raise it by two",
    "down 5 notches"), the level given ("volume to 12"), else three steps either way."""
    sign = -1 if re.search(_LESS, text) else 1
    by = _steps(text)
    if by is not None:
        return Command("adjust_volume", {"delta": sign * by})
    value = _number(text)
    if value is not None:
        return Command("set_volume", {"level": value})
    return Command("adjust_volume", {"delta": sign * 3})


def _steps(text: str) -> float | None:
    """How many steps up or down a level goes where a number says how far, not where to ("up to 5" is a level)."""
    return (
        _number(text, _BY)
        or _number_before(text, _STEPS)
        or _number(text, _OR_SO)
        or (_number(text, _UP_DOWN_BY) if not re.search(r"\b(?:to|at)\s+\d", text) else None)
    )


def _number_before(text: str, what: str) -> float | None:
    m = re.search(rf"(-?\d+(?:\.\d+)?){what}", text)
    return float(m.group(1)) if m else None


def _degrees_by(text: str) -> float | None:
    """A change of temperature by so many degrees, signed by the words around it: "up two degrees", "drop it by
    three", "two degrees warmer"; None where a number is a setting ("up to 22") or no way is said."""
    m = re.search(
        r"\b(?:up|down|by)\s+(\d+(?:\.\d+)?)\s*(?:degrees?|deg)?\b(?! ?(?:percent|%|levels?|notch))"
        r"|\b(\d+(?:\.\d+)?)\s*degrees?\s+(?:up|down|warmer|cooler|colder|hotter|higher|lower)\b"
        r"|\b(?:increase|raise|decrease|lower|drop|reduce|bump)\b(?:(?!\bto\b).)*?\b(\d+(?:\.\d+)?)\s*degrees?\b",
        text,
    )
    if m is None or not re.search(_TEMPERATURE_WORDS, text):
        return None
    up, down = re.search(_UP, text), re.search(_DOWN, text)
    if bool(up) == bool(down):
        return None
    by = float(m.group(1) or m.group(2) or m.group(3))
    return by if up else -by


def command_for(topic: str, raw: str, state: dict[str, Any]) -> Command | None:
    """The tool call for a request the grammar did not read but the intent model placed (`topic`, one of
    `exemplars/car.tsv`'s): which way from the words ("shut", "too loud", "I'm freezing"), the slots as the
    grammar reads them, defaults for the rest. None: a slot it cannot do without (a destination, a number,
    which way a track goes)."""
    text = _read(raw)
    if topic in ("window", "sunroof"):
        opening = _opening(text)
        if topic == "sunroof" or re.search(_ROOF, text):  # "the roof window"
            return Command("set_sunroof", {"position": _amount(text, opening)})
        return Command("set_window", {"window": window_group(text), "position": _amount(text, opening)})
    if topic == "seat_heat":
        return _seat_heating(text, state)
    if topic == "temperature":
        zone = _zone(text)
        if (by := _degrees_by(text)) is not None:
            return Command("adjust_temperature", {"zone": zone, "delta": by})
        by = _number(text, _BY) or (2 if re.search(r"\bcouple\b", text) else None)
        value = _number(text)
        if value is not None and by is None and not re.search(r"\bdegrees? (?:warmer|cooler|colder|hotter)\b", text):
            return Command("set_temperature", {"zone": zone, "celsius": _celsius(value, text)})
        by = by or value or 1
        if re.search(_HOT, text) and not re.search(r"\b(?:too cold|cold|chilly|freezing)\b", text):
            return Command("adjust_temperature", {"zone": zone, "delta": -by})
        if re.search(_COLD, text):
            return Command("adjust_temperature", {"zone": zone, "delta": by})
        return None  # which way is not said
    if topic == "fan":
        return Command("set_fan", {"level": _fan_level(text, state)})
    if topic == "ac":
        if (celsius := _setting(text)) is not None:
            return Command("set_temperature", {"zone": _zone(text), "celsius": celsius})
        return Command("set_ac", {"on": not re.search(_OFF, text)})
    if topic == "defrost":
        rear = bool(re.search(r"\b(?:rear|back)\b", text))
        return Command("set_defrost", {"which": "rear" if rear else "front", "on": not re.search(r"\boff\b", text)})
    if topic == "volume":
        return _volume(text)
    if topic in ("track", "music"):
        action = _media_action(text, None)
        if action is None and re.search(r"\b(?:up|down|louder|quieter|lower|raise|softer)\b", text):
            return _volume(text)  # "turn up the radio"
        if action is None and topic == "track" and not re.search(_DISLIKE, text):
            return None  # "I love this song": which way is not said
        return Command("media", {"action": action or ("next" if topic == "track" else "play")})
    if topic == "navigate":
        m = re.search(
            r"\b(?:to|towards|for)\s+(?:the\s+)?(.+)$|\b((?:the\s+)?(?:nearest|closest)\s+.+)$", raw.strip(), re.I
        )
        if m is None and (home := re.search(r"\b(home|work)\b", text)):
            return Command("navigate", {"destination": home.group(1)})
        return Command("navigate", {"destination": (m.group(1) or m.group(2)).strip(" .!?")}) if m else None
    if topic == "cancel_navigation":
        return Command("cancel_navigation", {})
    if topic == "doors":
        return Command("lock_doors", {"locked": not re.search(rf"{_UNLOCK}|\bopen\b", text)})
    return None


# The intent model's car topics (`exemplars/car.tsv`), by the tools their commands call
_TOPIC_OF = {
    "set_window": "window",
    "set_sunroof": "sunroof",
    "set_seat_heating": "seat_heat",
    "adjust_temperature": "temperature",
    "set_temperature": "temperature",
    "set_fan": "fan",
    "set_ac": "ac",
    "set_defrost": "defrost",
    "adjust_volume": "volume",
    "set_volume": "volume",
    "set_media_source": "music",
    "navigate": "navigate",
    "cancel_navigation": "cancel_navigation",
    "lock_doors": "doors",
}
TOPICS = frozenset({*_TOPIC_OF.values(), "track"})


def topic(command: Command) -> str:
    """The intent model's topic of a command (`command_for`'s inverse): how the model's reading is checked
    against the grammar's."""
    if command.tool == "media":
        return "track" if command.arguments["action"] in ("next", "previous") else "music"
    return _TOPIC_OF[command.tool]
