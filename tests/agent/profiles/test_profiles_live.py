"""The in-car and translation profiles behind the real transport, spoken to with espeak-ng."""

from __future__ import annotations

import numpy as np
import pytest

from agent.client import RATE, AgentClient
from agent.engines.cascade.models import load_models
from benchmarks.harness import (
    espeak_rendering,
    make_config,
    media_flowing,
    quiet_again,
    running,
    spoken,
    to_16k,
    wait_until,
    ws_url,
)
from tests.support import ask, best_match


@pytest.fixture(scope="module")
def models():
    return load_models()


def tool_results(turn):
    return [m for m in turn["messages"] if m["type"] == "tool"]


async def test_spoken_car_commands_change_the_car_and_say_so(models, tmp_path):
    async with running(make_config("cascade")) as server:
        client = AgentClient(ws_url(server), profile="in_car")
        await client.connect()
        initial = await client.wait_for(lambda m: m["type"] == "tool" and m["name"] == "get_vehicle_state")
        assert initial["result"]["state"]["windows"]["front_left"] == 0
        await media_flowing(client)
        turns = {}
        for said in (
            "Open the front window.",
            "Turn on the seat heating for the driver.",
            "Set the temperature to 23 degrees.",
            "Make it warmer.",
            "Open the fifth window.",
            "Make the temperature 90 degrees.",
        ):
            turns[said] = await ask(client, spoken(said, tmp_path))
        await client.close()

    # Tool events in order over the whole conversation (robust to a turn the VAD split in two)
    tools = [m for t in turns.values() for m in tool_results(t)]
    names = [(m["name"], m["result"]["ok"]) for m in tools]
    assert names[:5] == [
        ("set_window", True),
        ("set_seat_heating", True),
        ("set_temperature", True),
        ("adjust_temperature", True),
        ("set_window", False),
    ], ([(m["name"], m["arguments"]) for m in tools], {said: t["user"] for said, t in turns.items()})
    # "90 degrees" is sometimes misheard by Whisper tiny on espeak's voice; when heard, it must be refused
    assert names[5:] in ([], [("set_temperature", False)]), names
    states = [m["result"]["state"] for m in tools]
    assert states[0]["windows"] == {"front_left": 100, "front_right": 100, "rear_left": 0, "rear_right": 0}
    assert states[1]["seat_heating"]["driver"] == 2
    assert states[2]["climate"]["temperature"] == {"driver": 23.0, "passenger": 23.0}
    assert states[3]["climate"]["temperature"]["driver"] == 24.0
    assert all(st == states[3] for st in states[4:])  # the refused requests changed nothing
    assert "fifth" in tools[4]["result"]["message"]
    if len(tools) > 5:
        assert "16 to 30" in tools[5]["result"]["message"]
    # the spoken confirmation says what was done
    heard = models.recognizer.transcribe(to_16k(turns["Open the front window."]["audio"])).lower()
    assert "front window" in heard, heard
    heard = models.recognizer.transcribe(to_16k(turns["Open the fifth window."]["audio"])).lower()
    assert "fifth window" in heard, heard


async def test_english_paragraph_comes_back_as_spanish_while_still_talking(models, tmp_path):
    sentences = ["Good morning.", "Where is the train station?", "I need a doctor.", "Thank you very much."]
    gap = np.zeros(int(0.9 * RATE), np.float32)
    paragraph = np.concatenate([x for s in sentences for x in (spoken(s, tmp_path), gap)])
    async with running(make_config("cascade")) as server:
        client = AgentClient(ws_url(server), profile="translate")
        # no loudspeaker, and it says so: the user talks over every interpretation, and the server's canceller
        # would take the first second or so of that for an echo it has not yet ruled out (media/echo_cancel.py)
        client.echo_cancelled = True
        client.target_lang = "es"
        await client.connect()
        await media_flowing(client)
        start = len(client.messages)
        ident = client.mic.play(paragraph)
        await client.wait_for(
            lambda m: m["type"] == "transcript" and m["role"] == "assistant" and m["final"] and m.get("segment") == 4,
            60,
            start,
        )
        spoke = await wait_until(lambda: max(np.abs(f).max() for f in client.received.frames) > 0.05, 20)
        heard_from = next(i for i, t in enumerate(client.received.times) if t >= client.mic.sent_at[ident])
        await quiet_again(client, heard_from)
        received = to_16k(np.concatenate(client.received.frames[heard_from:]))
        await client.close()
    msgs = client.messages[start:]
    times = client.message_times[start:]
    captions = [(t, m) for t, m in zip(times, msgs, strict=True) if m["type"] == "transcript" and m["final"]]
    sources = [m for _, m in captions if m["role"] == "user"]
    targets = [(t, m) for t, m in captions if m["role"] == "assistant"]
    print("captions:", [(s["text"], t["text"]) for s, (_, t) in zip(sources, targets, strict=False)])
    assert [m["segment"] for _, m in targets] == [1, 2, 3, 4]
    assert all(m["lang"] == "es" for _, m in targets) and all(m["lang"] == "en" for m in sources)
    spanish = " ".join(m["text"].lower() for _, m in targets)
    for word in ("buenos", "tren", "doctor", "gracias"):
        assert word in spanish, spanish
    # the first segments were captioned (and spoken) while the speaker was still talking
    speaking_until = client.mic.sent_at[ident] + paragraph.size / RATE
    assert targets[0][0] < speaking_until - 2.0 and targets[1][0] < speaking_until
    assert not any(m["type"] == "metrics" and m["interrupted"] for m in msgs)  # nobody was cut off
    assert spoke, "the translations were not spoken"
    # ... in a Spanish voice: what came back sounds like espeak-ng's own Spanish rendering of the captions,
    # far more than like its English voice reading the same words
    for _, m in targets[1:3]:
        spanish_voice = best_match(espeak_rendering(m["text"], "es"), received)
        english_voice = best_match(espeak_rendering(m["text"], "en"), received)
        print(f"{m['text']!r}: like espeak-ng es {spanish_voice:.2f}, like espeak-ng en {english_voice:.2f}")
        assert spanish_voice > 0.9 and spanish_voice > english_voice + 0.1
