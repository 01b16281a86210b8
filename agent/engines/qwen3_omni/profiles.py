"""What each profile asks of Qwen3-Omni: its system prompt, its tools, and how tool calls are read.

Qwen's chat format lists function definitions inside `<tools>` in the system
prompt; the model answers a request with `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`. Calls are parsed here, validated and executed by the
profile's state model (`agent.profiles.car.Car`), and the results go back to the
model as `<tool_response>` so that it speaks the confirmation or the refusal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agent.profiles import Profile
from agent.profiles.car import TOOLS, Car
from agent.profiles.prompts import CAR_PROMPT, DEFAULT_PROMPT, translate_prompt

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def tools_block(tools: list[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{lines}\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    error: str | None = None  # why the call could not be read; it is refused, not run


def parse_tool_calls(text: str) -> list[ParsedCall]:
    calls = []
    for body in TOOL_CALL.findall(text):
        try:
            obj = json.loads(body)
        except ValueError as exc:
            calls.append(ParsedCall("?", {}, f"the tool call is not JSON ({exc.msg})"))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            calls.append(ParsedCall("?", {}, "the tool call has no function name"))
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models send the arguments as a JSON string
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        if not isinstance(args, dict):
            calls.append(ParsedCall(obj["name"], {}, "the tool call's arguments are not an object"))
            continue
        calls.append(ParsedCall(obj["name"], args))
    return calls


def starts_tool_call(text: str) -> bool:
    """The reply is a tool call, not speech: it begins (or may begin) with the tag."""
    head = text.lstrip()[: len("<tool_call>")]
    return bool(head) and "<tool_call>".startswith(head)


@dataclass
class ProfileSetup:
    profile: Profile
    system: str
    car: Car | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def barge_in(self) -> bool:
        return self.profile.barge_in

    @property
    def interpreting(self) -> bool:
        return self.profile.interpreting

    def run_calls(self, calls: list[ParsedCall]) -> list[dict[str, Any]]:
        """Validate and execute; every call gets a result, refusals included."""
        results = []
        for call in calls:
            if call.error is not None or self.car is None:
                why = call.error or "this profile has no tools"
                state = self.car.state.snapshot() if self.car else {}
                results.append(
                    {
                        "name": call.name,
                        "arguments": call.arguments,
                        "result": {"ok": False, "message": why, "state": state},
                    }
                )
                continue
            results.append(
                {"name": call.name, "arguments": call.arguments, "result": self.car.call(call.name, call.arguments)}
            )
        return results


def tool_response_text(results: list[dict[str, Any]]) -> str:
    return "\n".join(
        "<tool_response>\n"
        + json.dumps({"name": r["name"], "ok": r["result"]["ok"], "message": r["result"]["message"]})
        + "\n</tool_response>"
        for r in results
    )


def setup(profile: Profile, options: dict[str, Any] | None = None) -> ProfileSetup:
    """The prompt for a profile: tools where it has a car, the languages where it interprets."""
    opts = options or {}
    if profile.interpreting:
        src, tgt = opts.get("source_lang", "en"), opts.get("target_lang", "es")
        return ProfileSetup(profile, translate_prompt(src, tgt), extra={"source_lang": src, "target_lang": tgt})
    if profile.vehicle:
        return ProfileSetup(profile, CAR_PROMPT + tools_block(TOOLS), car=Car())
    return ProfileSetup(profile, DEFAULT_PROMPT)
