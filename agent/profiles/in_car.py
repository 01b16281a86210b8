"""The in-car assistant: speech to validated vehicle tools, and a spoken result."""

from __future__ import annotations

from typing import Any

from agent.profiles.car import Car
from agent.profiles.car_intents import parse
from agent.profiles.dialog import DefaultAssistant, DialogContext, Reply

CAR_HELP = (
    "In the car I can open and close the windows and the sunroof, set the temperature, fan, air conditioning "
    "and defrost, turn on seat heating, control the music and volume, navigate, and lock the doors."
)


class InCarAssistant:
    def __init__(self) -> None:
        self.car = Car()
        self._general = DefaultAssistant()

    def initial_tool_calls(self) -> list[dict[str, Any]]:
        """The car's state when the session starts, so the page can draw it."""
        return [self.call("get_vehicle_state", {})]

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "arguments": arguments, "result": self.car.call(name, arguments)}

    def understands(self, text: str) -> bool:
        """A command with all it needs, or something the general assistant answers (no side effects)."""
        return parse(text, self.car.state.snapshot()) is not None or self._general.understands(text)

    def reply(self, text: str, ctx: DialogContext) -> Reply:
        command = parse(text, self.car.state.snapshot())
        if command is not None:
            call = self.call(command.tool, command.arguments)
            intent = "tool" if call["result"]["ok"] else "refused"
            return Reply(call["result"]["message"], intent, tool_calls=[call])
        general = self._general.reply(text, ctx)
        if general.intent == "help":
            return Reply(CAR_HELP, "help")
        if general.intent == "unknown":
            return Reply(f'Sorry, I didn\'t understand "{text.strip()}". {CAR_HELP}', "unknown")
        return general
