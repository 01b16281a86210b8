"""The in-car assistant: speech to validated vehicle tools, and a spoken result.

A question about how the car is ("Is the window open?") is answered from its state (`car_questions.py`). A
request in the car's words for what it has no tool for ("play BBC Radio 2", `NO_TOOL`), or in a skill's words
for what no skill does ("set a timer", `dialog.NO_SKILL`), is out of scope. Any other goes to the car's grammar
first (`car_intents.parse`: exact slots), then to the general
assistant's, then by meaning (`understanding.py`, the car's examples and the general assistant's): a car
topic is made a tool call from its words (`car_intents.command_for`), acted on when near an example, asked
back ("Did you mean: turn on the seat heating?") when only close; what is near nothing the car or the
assistant can do is said to be out of scope, with what it can do.
"""

from __future__ import annotations

import re
from typing import Any

from agent.profiles.car import Car
from agent.profiles.car_intents import (
    LIKED,
    MUSIC_ON,
    TOPICS,
    Command,
    command_for,
    parse,
    says_which_way,
    topic,
)
from agent.profiles.car_questions import asked_about, state_answer
from agent.profiles.dialog import (
    CUES,
    DECLINED,
    INTENTS,
    NO_SKILL,
    DefaultAssistant,
    DialogContext,
    Reply,
    answer,
    cued,
    normalise,
)
from agent.profiles.understanding import NONE, Guess, IntentModel, clauses, vocabulary

CAR_HELP = (
    "In the car I can open and close the windows and the sunroof, set the temperature, fan, air conditioning "
    "and defrost, turn on seat heating, control the music and volume, navigate, and lock the doors."
)
# Parts of a car this one has no tool for: a request about them is out of scope, however near a tool's examples
# it reads ("open the boot" is near "open the window")
NOT_MINE = re.compile(
    r"\b(?:boot|trunk|bonnet|hood|garage|headlights?|lights|mirrors?|engine|tyres?|tires?|horn|indicators?|"
    r"blinkers?|beams?|hazards?|washer|hatchback|tailgate|cruise control|autopilot|self driving|massage|gears?|"
    r"handbrake|parking brake|"
    r"(?:open|shut|close) (?:the |my |her |his |their )?(?:\w+ )?doors?|"
    r"seat (?:forward|back|position)|steering|roof (?:rack|box|bars?))\b"
    # a seat moved ("raise my seat", "recline the passenger seat"), not heated
    r"|\b(?:raise|lower|move|recline|adjust|slide|tilt)\b(?!.*\b(?:heat|warm))(?:.*\bseats?\b)"
)
# What the car has words for but no tool: a station ("play BBC Radio 2" is no "play"), a ride booked ("book me
# a cab to the station" is no route), a home's doors ("lock my front door at home"), how long the way is
NO_TOOL = re.compile(
    r"\b(?:radio stations?|fm|frequency|tune (?:the radio |it |in )?(?:to|into)|bbc)\b|"
    r"\bradio (?:\d|one|two|three|four|five|six)\b|"
    r"\b(?:book|order|call|get) (?:me |us )?(?:a |an )?(?:cab|taxi|uber|lyft|ride)\b|\bat home\b|"
    r"\bhow (?:long|far)\b|\bhang up\b|"  # how far there is, a phone call
    # parts and services the car's words are used of, read before the grammar (which takes "the rear window
    # wiper" for a window): the wipers, the map's look, the seat's lumbar support, the warranty, the calendar, a
    # route's tolls, music saved or downloaded, the windows' blinds and child locks, the seats' cooling
    r"\b(?:wipers?|night mode|lumbar|warranty|calendar|toll roads?|download|save this song|blinds|"
    r"(?:the|a|window|sun) blind|sun ?shades?|child locks?(?! no\b)|seat cooling|cooled seats?|ventilated seats?)\b"
)
# What is played and is no music ("play my voicemail", "play I spy"), out of scope: the few kinds there are
NOT_MUSIC = re.compile(
    r"\b(?:play|put on|listen to)\b.*\b(?:podcasts?|voicemails?|audio ?books?|games?|i spy|videos?|movies?|films?|"
    r"episodes?|messages?|news|reports?|chess|cards)\b"
)
# Anything else asked to be played ("play ...", "can you put on ...", "I want to listen to ...") is music,
# whoever it is by: the model has seen few of the names people ask for, and one it has not ("play Dua Lipa",
# "Taylor Swift") weighs toward none, so its none does not overrule the grammar's play
_ASKING = (
    r"^(?:(?:please|can you|could you|would you|will you|just|hey|ok|okay|um|uh|so|now|right|go on|and|maybe|"
    r"i want to|i'd like to|let's) )*"
)
PLAY = re.compile(
    rf"{_ASKING}(?:play|put on|stick on|chuck on|throw on|listen to|hear|{MUSIC_ON}|have something to listen to|"
    r"(?:i )?fancy|i'm in the mood for)\b"
)
# ... and these say music whatever follows ("chuck on some Midnight Oil"), where the grammar knows no genre in it
MUSIC_VERB = re.compile(rf"{_ASKING}(?:stick|chuck|throw|whack|bang) on\b")


# a question of how things are or work ("how do electric windows work", "is it safe to leave the sunroof open",
# "what does the AC button mean"): the car's words asked about, not for. The way somewhere is the way there,
# how to use the assistant is help, how many people the camera's count
KNOWLEDGE = re.compile(
    r"^(?:how (?:do|does|did|often|hot|cold|much|many|old|big|fast|come)|why (?:do|does|did)|does|"
    r"who (?:invented|made|makes|designed|designs|built|builds|discovered|came up with)|"
    r"is it (?:safe|legal|illegal|bad|normal|true|better|worth)|"
    # "is it okay to leave the dog in the car ...", where "is it ok to open the sunroof" asks for it
    r"is it (?:okay|ok|alright|fine) (?:to|if)\b(?! (?:i |we |you )?(?:open|close|shut|turn|put|lower|raise|crack|"
    r"roll|switch|have|get|set|play|pause|skip|lock|unlock)\b)|"
    r"what(?:'s| is| are) the (?:difference|point|best|meaning)|what does\b.*\bmean$)\b"
    r"(?!.*\b(?:you|voice|assistant|get (?:to|back|home)|people|of us)\b)(?!.*\bthis (?:thing )?work)"
)
CAR_CUES = CUES | {
    # a window by where it is ("the rear left one"), or wound ("roll mine up")
    "window": re.compile(
        r"\bwindows?\b|\b(?:back|rear|front) (?:left|right) ones?\b|\b(?:roll|wind) \w+ (?:up|down)\b"
    ),
    "sunroof": re.compile(r"\b(?:sun ?roof|moon ?roof|roof)\b"),
    "seat_heat": re.compile(r"\bseats?\b"),
    "temperature": re.compile(
        r"\b(?:temperature|degrees|thermostat|heating|heater|climate|hot|cold|warm|cool|cabin|fresher)\b"
    ),
    "fan": re.compile(r"\b(?:fan|blower|vents?|airflow)\b"),
    "ac": re.compile(r"\b(?:ac|a c|aircon|air con|air conditioning|air conditioner)\b"),
    "defrost": re.compile(
        r"\b(?:defrost|defog|demist|fog|fogged|foggy|mist|misted|steam|steamed|windscreen|windshield)\b"
    ),
    "volume": re.compile(r"\b(?:volume|loud|louder|quiet|quieter|sound|hear)\b"),
    "track": re.compile(r"\b(?:track|song|skip|previous|next)\b"),
    "music": re.compile(r"\b(?:music|radio|playing|pause|tunes|playlist)\b"),
    "navigate": re.compile(r"\b(?:navigate|navigation|directions|route|destination|take me|get me to|head to)\b"),
    "cancel_navigation": re.compile(
        r"\b(?:navigation|route|directions|guidance|destination)\b.*\b(?:stop|cancel|end|off|clear)\b|"
        r"\b(?:stop|cancel|end|clear)\b.*\b(?:navigation|navigating|route|directions|guidance|destination)\b"
    ),
    "doors": re.compile(r"\b(?:lock|unlock|locks|locked|unlocked)\b"),
}


# What to ask where a car topic's request leaves out what it cannot do without (`command_for`'s None)
MISSING = {
    "navigate": "Where would you like to go?",
    "track": "Should I skip this track, go back one, or pause the music?",
    None: "Which way? For example: make it warmer, or set it to 21 degrees.",
}


def describe(command: Command) -> str:
    """A tool call in words, for asking back."""
    a = command.arguments
    if command.tool == "set_window":
        return f"{'open' if a['position'] else 'close'} the {a['window'].replace('_', ' ')} window"
    if command.tool == "set_sunroof":
        return f"{'open' if a['position'] else 'close'} the sunroof"
    if command.tool == "set_seat_heating":
        return f"turn {'on' if a['level'] else 'off'} the {a['seat'].replace('_', ' ')} seat heating"
    if command.tool == "adjust_temperature":
        return f"make it {'warmer' if a['delta'] > 0 else 'cooler'}"
    if command.tool == "set_temperature":
        return f"set the temperature to {a['celsius']:g} degrees"
    if command.tool == "set_fan":
        return f"set the fan to {a['level']}"
    if command.tool == "set_ac":
        return f"turn the air conditioning {'on' if a['on'] else 'off'}"
    if command.tool == "set_defrost":
        return f"turn {'on' if a['on'] else 'off'} the {a['which']} defrost"
    if command.tool == "adjust_volume":
        return f"turn the volume {'up' if a['delta'] > 0 else 'down'}"
    if command.tool == "media":
        steps = {"next": "skip to the next track", "previous": "go back a track"}
        return steps.get(a["action"], f"{a['action']} the music")
    if command.tool == "navigate":
        return f"navigate to {a['destination']}"
    if command.tool == "cancel_navigation":
        return "cancel the navigation"
    if command.tool == "lock_doors":
        return f"{'lock' if a['locked'] else 'unlock'} the doors"
    return command.tool.replace("_", " ")


MOVED = frozenset({"set_window", "set_sunroof"})  # what opens unless told to close (`car_intents._opening`)


class InCarAssistant:
    OUT_OF_SCOPE = f"Sorry, I can't do that. {CAR_HELP}"

    def __init__(self, model: IntentModel | None = None) -> None:
        self.car = Car()
        self.model = model or IntentModel.for_profile("car")
        self._general = DefaultAssistant(self.model)
        self.asked: Command | None = None  # a tool call asked back ("Did you mean ...?") and not yet answered

    def initial_tool_calls(self) -> list[dict[str, Any]]:
        """The car's state when the session starts, so the page can draw it."""
        return [self.call("get_vehicle_state", {})]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "arguments": arguments, "result": self.car.call(name, arguments)}

    def understand(self, text: str, heard: bool = False) -> tuple[Command | None, str, bool]:
        """What `text` asks of the car: its tool call (None: not the car's), the intent, and whether sure. The
        grammars read it word for word and the model checks them: where it is sure the request is another of
        the car's topics, or nothing it can do, a word the grammar caught is not what was asked ("the roof
        window" is the sunroof, "the back window is frosted" the rear defrost), and the model's topic stands
        where its words say which way. `heard`: see `IntentModel.guess`; a window or the roof heard without a
        word of which way is asked back, not opened ("Window half made" was "windows up, mate")."""
        command, intent, sure = self._understand(text, heard)
        if heard and sure and command is not None and command.tool in MOVED and not says_which_way(text):
            return command, intent, False
        return command, intent, sure

    def _understand(self, text: str, heard: bool) -> tuple[Command | None, str, bool]:
        state = self.car.state.snapshot()
        said = normalise(text)
        if NO_TOOL.search(said) or NO_SKILL.search(said) or KNOWLEDGE.search(said) or NOT_MUSIC.search(said):
            return None, NONE, True
        command = parse(text, state)
        opening = clauses(text)
        if command is None and any(MUSIC_VERB.search(c) for c in opening):
            command = Command("media", {"action": "play"})
        if command is not None and command.arguments.get("action") == "play" and any(PLAY.search(c) for c in opening):
            return command, "grammar", True
        if command is not None or self._general.understands_exactly(said):
            read = (command, "grammar", True) if command is not None else (None, "general", True)
            guess = self._guess(text, heard)
            if not self.model.overrules(guess, topic(command) if command else "general", TOPICS | INTENTS):
                return read
            if guess.intent == NONE and command is not None and self._asked_in(opening, command, heard, state):
                return read
            if guess.intent in INTENTS:
                return None, "general", True  # the general assistant checks its own grammar
            if guess.intent == NONE:
                return None, NONE, True
            instead = command_for(guess.intent, text, state)
            return (instead, guess.intent, True) if instead is not None else read
        if not said:
            return None, "general", True  # the general assistant asks again
        if NOT_MINE.search(said):
            return None, NONE, True
        guess = self._guess(text, heard)
        if guess.intent == NONE or guess.intent in INTENTS:
            return None, guess.intent, guess.sure
        command = command_for(guess.intent, text, state)
        if command is None and guess.intent == "track" and LIKED.search(said):
            return None, NONE, True
        return command, guess.intent, guess.sure

    def _asked_in(self, opening: list[str], command: Command, heard: bool, state: dict[str, Any]) -> bool:
        """Whether the first clause of a longer request reads as `command` by itself and the model does not take
        it for out of scope: a reason or an aside after a request ("open the rear left one, he wants to wave at
        his nan") leans the whole toward nothing the car does. Of three words or more: a word alone ("Next,
        today, my running 10-bit display.", as heard) says too little."""
        first = opening[0] if len(opening) > 1 else ""
        if len(first.split()) < 3 or parse(first, state) != command:
            return False
        return not self.model.overrules(self._guess(first, heard), topic(command), TOPICS | INTENTS)

    def _guess(self, text: str, heard: bool) -> Guess:
        return self.model.guess(text, cued(normalise(text), CAR_CUES), heard)

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The words its requests are made of (the general assistant's too), for a second reading."""
        return vocabulary("car")

    def acts_on(self, text: str) -> bool:
        """`reply` would act on `text` heard or answer it (not ask back, not say it cannot): no side effects; see
        `DefaultAssistant.acts_on`."""
        said = normalise(text)
        if not said:
            return False
        if self.asked is not None and answer(said) is not None:
            return True
        if (answered := self._question(text)) is not None:
            return answered != self.OUT_OF_SCOPE
        command, intent, sure = self.understand(text, heard=True)
        if command is not None:
            return sure
        if intent in ("grammar", "general") or intent in INTENTS:
            return self._general.acts_on(text)
        return False  # out of scope, or a car topic with a slot missing (asked)

    def understands(self, text: str) -> bool:
        """A command the grammar reads with all it needs, or something the general assistant answers (no side
        effects; see `DefaultAssistant.understands`)."""
        said = normalise(text)
        if (answered := self._question(text)) is not None:
            return answered != self.OUT_OF_SCOPE
        answering = self.asked is not None and answer(said) is not None
        return answering or parse(text, self.car.state.snapshot()) is not None or self._general.understands(text)

    def reply(self, text: str, ctx: DialogContext) -> Reply:
        said = normalise(text)
        asked, self.asked = self.asked, None
        if asked is not None and (yes := answer(said)) is not None:
            return self._act(asked) if yes else DECLINED
        if (answered := self._question(text)) is not None:
            if answered == self.OUT_OF_SCOPE:
                return Reply(answered, "unknown")
            return Reply(answered, "state", tool_calls=[self.call("get_vehicle_state", {})])
        command, intent, sure = self.understand(text, ctx.heard)
        if command is not None and sure:
            return self._act(command)
        if command is not None:
            self.asked = command
            return Reply(f"Did you mean: {describe(command)}?", "ask")
        if intent == NONE:
            return Reply(self.OUT_OF_SCOPE, "unknown")
        if intent not in ("grammar", "general") and intent not in INTENTS:  # a car topic, a slot missing
            return Reply(MISSING.get(intent, MISSING[None]), "ask")
        general = self._general.reply(text, ctx)
        if general.intent == "help":
            return Reply(CAR_HELP, "help")
        if general.intent == "unknown":
            return Reply(self.OUT_OF_SCOPE, "unknown")
        return general

    def _question(self, text: str) -> str | None:
        """A yes/no question about a part of the car ("Is the window open?"): the answer from its state, or
        `OUT_OF_SCOPE` where the state does not say ("Is the sunroof waterproof?"); never a command. None: no
        such question."""
        asked = asked_about(text)
        if asked is None:
            return None
        return state_answer(asked, self.car.state.snapshot()) or self.OUT_OF_SCOPE

    def _act(self, command: Command) -> Reply:
        call = self.call(command.tool, command.arguments)
        intent = "tool" if call["result"]["ok"] else "refused"
        return Reply(call["result"]["message"], intent, tool_calls=[call])
