"""Qwen3-Omni's side of the profiles: tools in the prompt, tool calls parsed, validated and executed."""

from __future__ import annotations

from agent.engines.qwen3_omni.profiles import parse_tool_calls, setup, starts_tool_call, tool_response_text
from agent.profiles import get_profile
from agent.profiles.car import TOOLS


def test_in_car_prompt_lists_every_tool():
    s = setup(get_profile("in_car"))
    for tool in TOOLS:
        assert f'"name": "{tool["function"]["name"]}"' in s.system
    assert "<tool_call>" in s.system and s.car is not None and s.barge_in


def test_tool_calls_run_on_the_car_and_bad_ones_are_refused():
    s = setup(get_profile("in_car"))
    text = (
        '<tool_call>\n{"name": "set_window", "arguments": {"window": "front", "position": 100}}\n</tool_call>\n'
        '<tool_call>{"name": "set_temperature", "arguments": "{\\"zone\\": \\"all\\", \\"celsius\\": 90}"}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "fly", "arguments": {}}</tool_call>'
    )
    calls = parse_tool_calls(text)
    assert [c.name for c in calls] == ["set_window", "set_temperature", "?", "fly"]
    results = s.run_calls(calls)
    ok = [r["result"]["ok"] for r in results]
    assert ok == [True, False, False, False]
    state = results[0]["result"]["state"]
    assert results[-1]["result"]["state"] == state  # refusals changed nothing after the window
    assert "not JSON" in results[2]["result"]["message"]
    response = tool_response_text(results)
    assert response.count("<tool_response>") == 4 and '"ok": false' in response


def test_tool_call_is_recognised_early_so_it_is_not_spoken():
    assert starts_tool_call("<tool")
    assert starts_tool_call("  <tool_call>{")
    assert not starts_tool_call("Sure, opening")
    assert not starts_tool_call("")


def test_translation_prompt_and_no_barge_in():
    s = setup(get_profile("translate"), {"source_lang": "en", "target_lang": "es"})
    assert "English" in s.system and "Spanish" in s.system and not s.barge_in
