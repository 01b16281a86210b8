import datetime as dt

import pytest

from agent.profiles.dialog import DefaultAssistant, DialogContext, Seen
from agent.profiles.policies import make_policy

NOW = dt.datetime(2026, 11, 29, 21, 5, tzinfo=dt.UTC)


def ask(text, faces=None, history=()):
    return DefaultAssistant().reply(text, DialogContext(NOW, lambda: Seen(faces), list(history)))


@pytest.mark.parametrize(
    "said,intent,answer",
    [
        ("What time is it?", "time", "It's 9:05 PM."),
        ("what's the time", "time", "It's 9:05 PM."),
        ("What's the date today?", "date", "Today is Sunday, November 29, 2026."),
        ("What day is it?", "date", "Today is Sunday, November 29, 2026."),
        ("Repeat after me: the quick brown fox.", "repeat_after", "The quick brown fox."),
        ("Say hello world", "repeat_after", "Hello world."),
        ("Hello!", "greet", "Hello! How can I help?"),
        ("Thank you.", "thanks", "You're welcome."),
        ("Right, take care.", "bye", "Goodbye! Talk to you later."),
        ("What time do you have?", "time", "It's 9:05 PM."),  # not a place's hours ("what time do they open")
    ],
)
def test_intents(said, intent, answer):
    reply = ask(said)
    assert (reply.intent, reply.text) == (intent, answer)


def test_capabilities_and_honest_fallback():
    assert "time" in ask("What can you do?").text and "see" in ask("What can you do?").text
    reply = ask("Order me a pizza with anchovies")
    assert reply.intent == "unknown"
    # said briefly, with what it can do, and without reading back what may have been misheard
    assert "anchovies" not in reply.text and "not something I can do" in reply.text and "time" in reply.text
    assert ask("Amendment.").intent == "unknown"  # "Mm hmm" as the recogniser heard it
    assert ask("  ").intent == "empty"


def test_repeat_last_uses_history():
    assert ask("What did I say?").text == "You haven't said anything before this."
    reply = ask("what did I just say", history=[("turn on the lights", "Sorry...")])
    assert reply.text == 'You said: "turn on the lights"'


@pytest.mark.parametrize(
    "faces,see,count",
    [
        (None, "camera is off", "camera is off"),
        (0, "don't see anyone", "I don't see anyone."),
        (1, "Yes, I can see you.", "I see one person."),
        (3, "Yes, I can see 3 people.", "I see 3 people."),
    ],
)
def test_vision_answers(faces, see, count):
    assert see in ask("Can you see me?", faces).text
    assert count in ask("How many people do you see?", faces).text


def test_vision_is_only_computed_when_asked():
    calls = []

    def seen():
        calls.append(1)
        return Seen(1)

    DefaultAssistant().reply("what time is it", DialogContext(NOW, seen))
    assert calls == []


def test_profiles_and_clear_errors():
    assert isinstance(make_policy("default"), DefaultAssistant)
    with pytest.raises(ValueError, match="unknown profile"):
        make_policy("cooking")
    with pytest.raises(ValueError, match="English only"):
        make_policy("translate", {"source_lang": "es", "target_lang": "en"})
