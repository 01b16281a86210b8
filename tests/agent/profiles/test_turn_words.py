"""The words' half of the end-of-turn verdict: unfinished, finished, or left to the sound."""

from __future__ import annotations

import pytest

from agent.profiles.dialog import DefaultAssistant
from agent.profiles.in_car import InCarAssistant
from agent.profiles.turn_words import Words, judge_words

CAR = InCarAssistant().understands
ASSISTANT = DefaultAssistant().understands


@pytest.mark.parametrize(
    "text",
    [
        "Set the temperature to",  # as recognisers write a hesitation: no final stop ...
        "Set the temperature to.",  # ... or with one
        "I would like to go to",
        "Turn the volume down and",
        "Could you open the",
        "Turn on the seat heating for.",
        "How many people can you?",
        "Remind me, um?",
        "What I really want to know is:",  # a colon or a comma says more is coming
        "What I merely wanted to know is",  # a copula that introduces what follows
        "The problem is.",
        "My sister,",
        "Set the temperature to 20.",  # "twenty ..." may be "twenty one"
        "Set the temperature to twenty",
        "I think it's",
    ],
)
def test_a_turn_whose_last_words_need_more_is_unfinished(text):
    verdict = judge_words(text, CAR)
    assert verdict.kind is Words.UNFINISHED, verdict
    assert verdict.why


@pytest.mark.parametrize(
    "text, understood",
    [
        ("Open the window.", CAR),  # a command the car can carry out as it stands
        ("Set the temperature to 21 degrees.", CAR),
        ("Lock the car doors.", CAR),
        ("What time is it?", ASSISTANT),  # a question the assistant answers
        ("Can you see me right now?", ASSISTANT),
        ("How far away is the moon from the earth?", None),  # a wh-question, whoever answers it
        ("Where are you from?", None),
    ],
)
def test_a_request_understood_as_it_stands_or_a_wh_question_is_finished(text, understood):
    assert judge_words(text, understood).kind is Words.FINISHED


@pytest.mark.parametrize(
    "text",
    [
        "I'm looking for a good place to eat.",  # it may go on ("... near the centre"): the sound decides
        "Turn the radio on.",  # "on", "in", "that", "is", "do" often end a turn: never judged unfinished
        "Repeat that.",
        "Do you know what day it is?",
        "I know what you do.",
        "What are you able to help me with?",  # a question's stranded preposition ...
        "What is the capital of",  # ... cannot be told from an unfinished one by the words: the sound decides
        "Do you know where the station is?",
        "",
    ],
)
def test_the_rest_is_left_to_the_sound(text):
    assert judge_words(text, None).kind is Words.UNSURE


def test_dangling_words_win_over_understanding():
    # the car would understand "open the window" in "open the window for ...": the words still wait
    assert judge_words("Open the window for", CAR).kind is Words.UNFINISHED
    assert CAR("Open the window for")


def test_understanding_acts_on_nothing():
    car = InCarAssistant()
    before = car.car.state.snapshot()
    assert car.understands("Open all the windows.")
    assert car.car.state.snapshot() == before
