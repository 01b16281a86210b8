"""Questions about how the car is are answered from its state, never acted on (`agent/profiles/car_questions.py`)."""

import datetime as dt

import pytest

from agent.profiles.car_intents import parse
from agent.profiles.dialog import DialogContext, Seen
from agent.profiles.in_car import InCarAssistant

CTX = DialogContext(dt.datetime(2026, 12, 2, 9, 30), lambda: Seen(1), [])


@pytest.mark.parametrize(
    "before,asked,answer",
    [
        (
            [("set_window", {"window": "rear_left", "position": 50})],
            "Is the window open?",
            "rear left window is open 50 percent",
        ),
        ([], "Is the driver's window open?", "driver window is closed"),
        ([("lock_doors", {"locked": False})], "Are the doors locked?", "unlocked"),
        ([], "Is the sunroof closed?", "sunroof is closed"),
        ([("set_defrost", {"which": "rear", "on": True})], "Is the rear window heated?", "rear defrost is on"),
        ([("set_seat_heating", {"seat": "passenger", "level": 3})], "Are the seats heated?", "passenger seat"),
        ([("set_fan", {"level": 5})], "Is the fan on?", "level 5"),
        ([], "Is the AC running?", "air conditioning is off"),
        ([("navigate", {"destination": "the airport"})], "Is the navigation on?", "the airport"),
    ],
)
def test_a_question_about_a_part_is_answered_from_the_state_and_changes_nothing(before, asked, answer):
    """Fails without the questions: the grammar reads the part and which way and acts ("Is the window open?"
    opened the driver's window, "Are the doors locked?" locked them, "Is the fan on?" set it to 3)."""
    car = InCarAssistant()
    for name, arguments in before:
        assert car.call(name, arguments)["result"]["ok"]
    state = car.car.state.snapshot()
    assert car.acts_on(asked) and car.understands(asked)
    reply = car.reply(asked, CTX)
    assert reply.intent == "state" and answer in reply.text, reply.text
    assert [c["name"] for c in reply.tool_calls] == ["get_vehicle_state"]
    assert car.car.state.snapshot() == state


@pytest.mark.parametrize("asked", ["Is the sunroof waterproof?", "Are the windows tinted?"])
def test_a_question_the_state_does_not_answer_is_out_of_scope(asked):
    car = InCarAssistant()
    reply = car.reply(asked, CTX)
    assert reply.intent == "unknown" and not reply.tool_calls
    assert not car.acts_on(asked)


@pytest.mark.parametrize(
    "asked,tool",
    [("Is it possible to open the window?", "set_window"), ("Are you able to close the sunroof?", "set_sunroof")],
)
def test_a_request_put_as_a_question_is_still_done(asked, tool):
    assert [c["name"] for c in InCarAssistant().reply(asked, CTX).tool_calls] == [tool]


@pytest.mark.parametrize("said", ["Can you lower my seat?", "Recline the passenger seat.", "Move my seat up a bit."])
def test_a_seat_moved_is_not_a_seat_heated(said):
    """Fails without `NOT_MINE`'s seat moves: "seat" cues the seat heating, which the model then turned on."""
    car = InCarAssistant()
    reply = car.reply(said, CTX)
    assert reply.intent == "unknown" and not reply.tool_calls


def test_less_heat_on_a_seat_is_a_level_down():
    """Fails on the old grammar, which turned the heating on at level 2 wherever no level was named."""
    state = InCarAssistant().car.state.snapshot()
    state["seat_heating"]["driver"] = 3
    assert parse("Lower the heat on my seat.", state).arguments == {"seat": "driver", "level": 2}
    state["seat_heating"]["driver"] = 0
    assert parse("Turn the seat heating down.", state).arguments == {"seat": "driver", "level": 0}
    assert parse("Heat my seat.", state).arguments == {"seat": "driver", "level": 2}
