"""Requests read by meaning (agent/profiles/understanding.py): paraphrases the grammars do not know, the
examples apart from the benchmark's corpora, near misses asked back, out of scope said so."""

import datetime as dt
from importlib import resources

import pytest

from agent.profiles import clinc150
from agent.profiles.car_intents import parse
from agent.profiles.dialog import DefaultAssistant, DialogContext, Seen, normalise
from agent.profiles.in_car import CAR_HELP, InCarAssistant
from agent.profiles.understanding import (
    NONE,
    NOVEL,
    SENTENCES,
    Guess,
    IntentModel,
    clauses,
    read_clinc150,
    read_examples,
    vocabulary,
)
from benchmarks.understanding import CLINC, NAMES, ONLY, PROFILES, read_corpus

NOW = dt.datetime(2026, 12, 2, 20, 15, tzinfo=dt.UTC)
CTX = DialogContext(NOW, lambda: Seen(2), [("Hello.", "Hello! How can I help?")])
HEARD = DialogContext(NOW, lambda: Seen(2), [("Hello.", "Hello! How can I help?")], heard=True)


@pytest.mark.parametrize(
    "said,intent",
    [  # typed to the default engine by a new user (issue 31), none of them in its grammar
        ("How late is it?", "time"),
        ("Could you check the current time for me", "time"),
        ("What sort of things can I ask you?", "help"),
        ("Are you able to see me at the moment?", "see_me"),
        ("Count the people in front of the camera.", "count"),
        ("What did I just tell you?", "repeat_last"),
    ],
)
def test_paraphrases_the_grammar_does_not_read(said, intent):
    assistant = DefaultAssistant()
    assert not assistant.understands_exactly(said)
    assert assistant.reply(said, CTX).intent == intent


@pytest.mark.parametrize(
    "said",
    ["Echo this: the little rainbow sails", "Okay so um, could you repeat after me: the little rainbow sails"],
)
def test_what_to_repeat_is_taken_from_the_words(said):
    assert DefaultAssistant().reply(said, CTX).text == "The little rainbow sails."


@pytest.mark.parametrize(
    "said,tool,arguments",
    [
        ("Warm up my seat.", "set_seat_heating", {"seat": "driver", "level": 2}),
        ("Let some fresh air in through the roof.", "set_sunroof", {"position": 100}),
        ("Clear the windshield, it's all fogged up", "set_defrost", {"which": "front", "on": True}),
        ("I'm freezing", "adjust_temperature", {"zone": "all", "delta": 1}),
        ("Skip this one", "media", {"action": "next"}),
        # music by whoever it is: the model, which has seen few names, took these for nothing the car does
        # (0.82-0.84) and overruled the grammar's play (`in_car.PLAY`)
        ("Play Taylor Swift", "media", {"action": "play"}),
        ("Could you play Dua Lipa?", "media", {"action": "play"}),
        # ... also asked for after a comma (`in_car.clauses`), or with a verb that says music whatever follows
        # (`in_car.MUSIC_VERB`): the model's none overruled the one, the grammar knew no genre in the other
        ("I'd love a bit of jazz, play something chill.", "media", {"action": "play"}),
        ("Chuck on some Midnight Oil.", "media", {"action": "play"}),
        ("Can we get some AC going? It's 90 out!", "set_ac", {"on": True}),  # the weather, not a setting (90 °F)
        ("Can you put the song on pause?", "media", {"action": "pause"}),  # put on pause, not put on
        ("I fancy some eighties rock.", "media", {"action": "play"}),  # the model's none overruled the grammar
        ("Start this song over.", "media", {"action": "previous"}),
        ("Make it a bit fresher in the cabin please.", "adjust_temperature", {"zone": "all", "delta": -1}),
        ("Kill the music.", "media", {"action": "pause"}),  # played on (heldout13)
        ("My mum's on the phone, can you lower the music a bit?", "adjust_volume", {"delta": -3}),  # played on
        # a reason after the request leaned the whole toward nothing the car does (the model's none, 0.72-0.78,
        # overruled the grammar); its first clause alone is a window (`InCarAssistant._asked_in`), with the cue of
        # a window named by where it is or wound (heldout12, read after it was measured: narrow, "open the rear
        # left one, she wants to wave at her nan" is still out of scope)
        (
            "open the rear right one, he wants to wave at his nan",
            "set_window",
            {"window": "rear_right", "position": 100},
        ),
        ("roll mine up, the road noise is doing my head in", "set_window", {"window": "driver", "position": 0}),
    ],
)
def test_car_requests_by_meaning(said, tool, arguments):
    reply = InCarAssistant().reply(said, CTX)
    assert reply.intent == "tool", reply.text
    call = reply.tool_calls[0]
    assert (call["name"], call["arguments"]) == (tool, arguments) and call["result"]["ok"]


def test_a_request_before_its_reason_is_read_by_itself_if_it_says_enough():
    """`InCarAssistant._asked_in`: the first clause, read by itself, keeps the grammar's command the whole
    request's reason leaned toward nothing (the cases above); a word alone does not ("next", heard in a text
    message misheard, skipped the track)."""
    assert InCarAssistant().reply("Next, today, my running 10-bit display.", HEARD).intent == "unknown"
    reply = InCarAssistant().reply("Freeze the song where it is, I'm trying to find the turning.", HEARD)
    assert [call["arguments"] for call in reply.tool_calls] == [{"action": "pause"}], reply.text


def test_a_road_recognised_is_no_face_recognised():
    """The camera's "recognise" (`dialog.NO_SKILL`) is of people: the route was out of scope (heldout12)."""
    command, _, sure = InCarAssistant().understand("You can stop navigating now, I recognise this road.")
    assert command is not None and command.tool == "cancel_navigation" and sure


def test_a_track_only_named_is_asked_which_way_and_one_praised_asks_nothing():
    """The model places "I love this song" with the tracks; nothing in it says skip, where "I'm sick of this song"
    does. It was skipped; then asked which way, though praise asks nothing of the car (two blind corpora)."""
    car = InCarAssistant()
    for said in ("I love this song", "This song is great.", "What a tune, this song is catchy."):
        reply = car.reply(said, CTX)
        assert reply.intent == "unknown" and not reply.tool_calls, (said, reply.text)
    reply = car.reply("This song.", CTX)
    assert reply.intent == "ask" and not reply.tool_calls and "skip" in reply.text, reply.text
    reply = car.reply("I'm sick of this song", CTX)
    assert [call["arguments"] for call in reply.tool_calls] == [{"action": "next"}], reply.text


def test_out_of_scope_is_said_with_what_it_can_do():
    for assistant, said in ((DefaultAssistant(), "What's the capital of France?"), (InCarAssistant(), "Call my wife")):
        reply = assistant.reply(said, CTX)
        assert reply.intent == "unknown" and "can't" in reply.text or "not something" in reply.text
        assert "France" not in reply.text and "wife" not in reply.text


def test_a_near_miss_is_asked_back_and_done_on_yes():
    car = InCarAssistant(IntentModel(read_examples("car"), sure=1.01))  # every reading by meaning only close
    reply = car.reply("Open the top, I want to see the stars.", CTX)
    assert reply.text == "Did you mean: open the sunroof?" and not reply.tool_calls
    assert car.car.state.sunroof == 0
    done = car.reply("Yes, please.", CTX)
    assert done.intent == "tool" and car.car.state.sunroof == 100
    car.car.call("set_sunroof", {"position": 0})
    assert car.reply("Open the top, I want to see the stars.", CTX).intent == "ask"
    assert car.reply("No.", CTX).intent == "declined" and car.car.state.sunroof == 0


def test_a_stop_word_that_ends_a_request_is_the_grammars():
    """Fails without the stop grammar's second part: read by meaning alone (here never sure), "not now, I'm busy,
    cancel" was asked back ("Did you mean that I stop?"); "don't stop" is not a stop."""
    assistant = DefaultAssistant(IntentModel(read_examples("default"), sure=1.01))
    assert assistant.reply("Hmm, not now, I'm driving, cancel.", CTX).intent == "stop"
    assert not assistant.understands_exactly("Please don't stop.")


def test_a_near_miss_of_the_default_assistant():
    assistant = DefaultAssistant(IntentModel(read_examples("default"), sure=1.01))
    assert assistant.reply("How late is it?", CTX).text == "Did you mean the time?"
    assert assistant.reply("Yeah.", CTX).intent == "time"


def test_nearest_a_none_example_is_out_of_scope():
    model = IntentModel([("time", "what time is it"), (NONE, "what is the weather like")], sure=0.5, unsure=0.1)
    assert model.guess("will the weather be nice").intent == NONE
    assert model.guess("tell me the time").intent == "time"


def test_understanding_is_cheap():
    """The issue's budget is 20 ms of CPU a request; the model is n-gram and vector lookups and one product."""
    import time

    model = IntentModel.for_profile("car")
    t0 = time.process_time()
    for _ in range(50):
        model.guess("could you make it a little less cold in here")
    assert (time.process_time() - t0) / 50 < 0.02


@pytest.mark.parametrize("profile,corpus", [("default", "default"), ("car", "in_car")])
def test_examples_are_apart_from_the_benchmark_corpora(profile, corpus):
    examples = {normalise(r) for _, r in read_examples(profile) + read_examples(profile, heard=True)}
    examples |= {normalise(r) for _, r in read_clinc150(profile)}
    said = [t for _, t in read_corpus(corpus)]
    heldout = [t for _, t in read_corpus(corpus, "heldout")]
    blind = [t for n in NAMES[2:] if corpus in ONLY.get(n, PROFILES) for _, t in read_corpus(corpus, n)]
    strangers = [t for n in CLINC for _, t in read_corpus(corpus, n)]
    assert len(said) >= 190 and len(heldout) >= 80 and len(blind) >= 250 and len(strangers) > 7000
    assert not examples & {normalise(t) for t in said + heldout + blind + strangers}


@pytest.mark.parametrize(
    "said",
    [
        "What time is the match on tonight?",
        "Help me pick a name for my cat.",
        "Play Bye Bye Love by the Everly Brothers.",
        "What day is the recycling collected?",
    ],
)
def test_the_model_checks_a_word_the_grammar_caught(said):
    """Fails without the check (`IntentModel.overrules`): the grammar reads each by a keyword ("what time",
    "help", "bye", "what day") and answers that; the model is sure it is nothing the assistant can do."""
    assistant = DefaultAssistant()
    assert assistant.understands_exactly(said)
    assert assistant.reply(said, CTX).intent == "unknown"
    unchecked = DefaultAssistant(IntentModel(read_examples("default"), overrule=float("inf")))
    assert unchecked.reply(said, CTX).intent != "unknown"


@pytest.mark.parametrize(
    "said,tool,arguments",
    [
        ("The windows are misting up, clear them.", "set_defrost", {"which": "front", "on": True}),
        ("The back window's frosted over, can you clear it?", "set_defrost", {"which": "rear", "on": True}),
    ],
)
def test_the_car_model_checks_the_grammars_topic(said, tool, arguments):
    """Fails without the check: the car's grammar reads both as a window ("window" wherever it stands); the model
    is sure of another topic, whose command is made from the same words."""
    car = InCarAssistant()
    assert parse(said, car.car.state.snapshot()).tool == "set_window"
    call = car.reply(said, CTX).tool_calls[0]
    assert (call["name"], call["arguments"]) == (tool, arguments) and call["result"]["ok"]
    unchecked = InCarAssistant(IntentModel(read_examples("car") + read_examples("car", heard=True), overrule=2.0))
    assert unchecked.reply(said, CTX).tool_calls[0]["name"] == "set_window"


@pytest.mark.parametrize("profile", ["default", "car"])
def test_minilms_vector_reads_examples_it_never_saw_better(profile):
    """Fails without MiniLM's sentence vector among the features (`sentences=0`, the model as it was): trained on
    four fifths of a profile's examples (the folds of `benchmarks/intent_folds.py`), the model places more of the
    fifth it never saw (here 222 against 210 of the default's 232, 391 against 379 of the car's 406)."""
    from benchmarks.intent_folds import fold

    examples = read_examples(profile)
    train = [(i, t) for i, t in examples if fold(t) != 0]
    unseen = [(i, t) for i, t in examples if fold(t) == 0]
    models = IntentModel(train), IntentModel(train, sentences=SENTENCES)
    placed = [sum(m.guess(t).intent == i for i, t in unseen) for m in models]
    assert placed[1] >= placed[0] + 0.02 * len(unseen), placed
    assert IntentModel.for_profile(profile).sentences == SENTENCES  # the assistants' models read it


def test_words_misheard_into_nothing_are_out_of_scope():
    """Fails without the nearness gate (`novel=0`): "Then pre-chalp." (Moonshine's reading of "temperature up" in
    a voice it hears badly) is near no example, but the classifier still placed it, as a goodbye (0.71), and the
    car said goodbye; heard, it is out of scope now (and so read again, leaning toward the car's words). Typed, a
    request is what the user meant, however unlike the examples: the gate is for what was heard. (With CLINC150's
    examples of what no skill answers the assistant's model holds it out of scope typed too, so the gate is shown
    on the examples written here.)"""
    said = "Then pre-chalp."
    model = IntentModel.for_profile("car")
    assert model.novel == NOVEL and model.guess(said, heard=True).intent == NONE
    assert InCarAssistant().reply(said, HEARD).intent == "unknown"
    assert not InCarAssistant().acts_on(said)  # the second reading asks of what was heard
    examples = read_examples("car") + read_examples("car", heard=True)
    gated, ungated = (IntentModel(examples, sentences=SENTENCES, novel=novel) for novel in (NOVEL, 0.0))
    assert gated.guess(said, heard=True).intent == NONE
    assert ungated.guess(said, heard=True).intent not in (NONE, "temperature")
    assert gated.guess(said).intent == ungated.guess(said).intent  # typed
    assert gated.guess("Temperature up.", heard=True).intent == "temperature"  # what was said is near its examples


def test_heard_words_are_near_an_example_in_any_of_their_clauses():
    """Fails without the clauses (`IntentModel._clauses`): heard, a request among reasons and asides is near no
    example as a whole, and was out of scope (heldout13, where typed it was understood); one of its clauses is
    near the examples of what it asks. What is near no example in any clause is still out of scope."""
    model = IntentModel.for_profile("default")
    for said, intent in [
        ("Sorry, I was doing the dishes. What was that you just said?", "repeat_last"),
        ("Hang on, the kettle was boiling. What did you just say?", "repeat_last"),
    ]:
        assert model.guess(said).intent == intent  # typed
        assert model.guess(said, heard=True).intent == intent, said
        whole = model.guess(normalise(said), heard=True)  # one clause: the words without their punctuation
        assert whole.intent == NONE, whole
        assert DefaultAssistant().reply(said, HEARD).intent == intent
    assert model.guess("Then pre-chalp. Over the stair.", heard=True).intent == NONE
    # Not in the car: a misheard clause near an example moves a part or answers for something else there
    # ("I can't see a thing, the windshield's all fogged up", heard so, is the default's see_me by its clause)
    misheard = "I can't see a thing, but when she falls on top."
    assert model.guess(misheard, heard=True).intent == "see_me"
    assert InCarAssistant().reply(misheard, HEARD).intent == "unknown"
    assert clauses("Traffic at 9:00, on the route to Leeds. 2.5 miles") == [
        "traffic at 9 00",
        "on the route to leeds",
        "2 5 miles",
    ]


def test_a_turns_words_are_read_once():
    """Fails without the model's kept readings (`IntentModel._scores`): the second reading's `acts_on`, the reply
    and, in the car, the general assistant's reply each read the same words again (MiniLM, TF-IDF, the
    classifier: a few ms each, on the way to the reply)."""
    said = "Could you tell me what you're good for?"
    car = InCarAssistant()
    before = car.model._scores.cache_info()
    assert car.acts_on(said) and car.reply(said, HEARD).intent == "help"
    after = car.model._scores.cache_info()
    assert after.misses - before.misses == 1 and after.hits > before.hits


def test_a_reading_by_meaning_does_not_end_a_turn_sooner():
    """Only the grammar's reading says a turn is finished (agent/profiles/turn_words.py): a near example is no
    proof the user has stopped."""
    assistant, car = DefaultAssistant(), InCarAssistant()
    assert assistant.reply("How late is it?", CTX).intent == "time" and not assistant.understands("How late is it?")
    assert not car.understands("Open the top, I want to see the stars.")
    assert car.understands("Open the sunroof.")


@pytest.mark.parametrize(
    "said",
    [
        "How would you say good night in Japanese?",
        "Say thank you in Spanish.",
        "Read my last message out loud.",
        "What time does the chemist shut?",
        "What can you see right now?",
        "Describe the room behind me.",
        "Switch off the camera.",
        "Zoom in on my face.",
        "Wake me up with an alarm at seven.",
        # the camera sees that someone is there, not how they look or what is written (heldout12, tuned)
        "What do you think of my outfit?",
        "Do I look tired to you?",
        "Can you read what it says on this sign?",
        "Can you recognise who this is?",
        "How many people live in Canada?",
        # ... nor what a thing held up is, what a sign says, things that are not people; it records nothing
        # (heldout13, tuned)
        "What's this mug I'm holding up to the camera?",
        "What does this label say?",
        "How many dogs can you see in the garden?",
        "Record what I say next.",
    ],
)
def test_a_skills_words_asking_what_no_skill_does_are_out_of_scope(said):
    """Fails without `dialog.NO_SKILL`: each has a skill's words ("say", "read ... last", "what time") and both
    assistants took it for that skill (repeated the words, said the time)."""
    for assistant in (DefaultAssistant(), InCarAssistant()):
        reply = assistant.reply(said, CTX)
        assert reply.intent == "unknown" and not reply.tool_calls, (said, reply.text)


@pytest.mark.parametrize(
    "said",
    [
        "Open the boot.",
        "Shut the hatchback, would you?",
        "Turn on the headlights.",
        "Switch on the windscreen wipers.",
        "Tune to BBC Radio 4.",
        "Play Heart FM.",
        "Switch to Radio 1.",
        "Order us a taxi to the airport.",
        "Lock the back door at home.",
        "How far is the next services?",
        "Hang up the call.",
        "Rear wiper on.",
        "Put the map in night mode.",
        # played, and no music (`in_car.NOT_MUSIC`): without it the grammar's play stood
        "Play my voicemail.",
        "Let's play a game.",
        "Play the traffic report.",
        "Tune the radio to 101.1.",  # a station, not music (heldout11, read after it was measured)
        # heldout13's kinds, read after it was measured: a station by its number in words, the windows' blinds
        # and child locks, the seats' cooling (read before the grammar: it took them for a window, a seat
        # heater), a door opened (the car only locks them)
        "Put Radio Three on.",
        "Can you lower the sun blinds on the rear windows?",
        "Child lock the back windows, the twins keep playing with them.",
        "Turn on the seat cooling.",
        "Open the passenger door for her.",
    ],
)
def test_what_the_car_has_no_tool_for_is_out_of_scope(said):
    """A part it has no tool for (`in_car.NOT_MINE`: "open the boot" is near "open the window"), and what it has
    words but no tool for: fails without `in_car.NO_TOOL` ("play", "to the airport", "lock" made a tool call for
    a station, a ride and a house)."""
    reply = InCarAssistant().reply(said, CTX)
    assert reply.intent == "unknown" and not reply.tool_calls, (said, reply.text)


@pytest.mark.parametrize(
    "said,does",
    [
        ("How does the seat heating know when to stop?", None),
        ("Why does the sunroof rattle on the motorway?", None),
        ("Is it bad to run the air con in winter?", None),
        ("What does the little fan symbol mean?", None),
        ("Does opening the windows use more fuel than the AC?", None),
        ("How often should I clean the air vents?", None),
        ("Who invented air conditioning?", None),
        ("How many people live in Canada?", None),  # no count of the camera's
        ("How do I get to the station?", "navigate"),  # the way there
        ("Why don't you open the window?", "set_window"),
        ("Is it ok to open the sunroof a bit?", "set_sunroof"),
        ("Is it okay to leave the kids in the car if I crack a window?", None),  # heldout13's kind, tuned
    ],
)
def test_asking_how_the_cars_parts_are_or_work_is_out_of_scope(said, does):
    """Fails without `in_car.KNOWLEDGE`: the grammar read a part and a way in each question and moved it (the
    windows opened, the seats heated); asking the way somewhere, or a suggestion, is still a request."""
    reply = InCarAssistant().reply(said, CTX)
    if does is None:
        assert reply.intent == "unknown" and not reply.tool_calls, (said, reply.text)
    else:
        assert [call["name"] for call in reply.tool_calls] == [does], (said, reply.text)


@pytest.mark.parametrize(
    "profile,said",
    [  # CLINC150's validation requests (benchmarks/corpora/clinc150-val.tsv), none of them its examples
        ("default", "confirm my johnny rockets reservation for this evening"),
        ("default", "i am trying to find out when is the next payday"),
        ("default", "can you check and see if my account's blocked"),
        ("car", "what is my schedule like today, any meetings with dan"),
        ("car", "can i call you adam instead of the current name"),
        ("car", "how to use credit card points"),
    ],
)
def test_what_strangers_ask_that_no_skill_does_is_out_of_scope(profile, said):
    """Fails without CLINC150's examples (`understanding.read_clinc150`): the model, which knew only the examples
    written here, took each for the skill whose words it has (repeated it, gave the date, looked at the camera)."""
    assistant = DefaultAssistant() if profile == "default" else InCarAssistant()
    reply = assistant.reply(said, CTX)
    assert reply.intent == "unknown" and not reply.tool_calls, (said, reply.text)


def test_a_grammars_reading_is_taken_for_nothing_only_when_the_model_is_surer():
    """CLINC150's examples put words of every kind in "none" ("jazz", "playlist", "receipt"), so a request the
    grammar reads is out of scope only at `OVERRULE_NONE`, above what overrules it for another skill. Fails at
    the old 0.5: "put on some jazz" is 0.69 none."""
    model = IntentModel.for_profile("car")
    assert not model.overrules(Guess(NONE, 0.65, True), "music") and model.overrules(Guess(NONE, 0.75, True), "music")
    assert model.overrules(Guess("help", 0.55, True), "music", {"help"})
    reply = InCarAssistant().reply("Put on some jazz.", CTX)
    assert [call["arguments"].get("action") for call in reply.tool_calls] == ["play"], reply.text


@pytest.mark.parametrize("profile", ["default", "car"])
def test_clinc150s_intents_are_mapped_to_each_assistants(profile):
    """Its skills are the assistant's intents, what depends on what came before is left out, the rest is none."""
    pairs = read_clinc150(profile)
    intents = {intent for intent, _ in pairs}
    assert NONE in intents and {"time", "date", "help", "greet", "bye", "thanks"} < intents
    assert ("navigate" in intents) == (profile == "car") and "repeat_last" not in intents
    assert clinc150.intent_of(profile, "play_music") == ("music" if profile == "car" else NONE)
    assert clinc150.intent_of(profile, "repeat") is None and clinc150.intent_of(profile, "balance") == NONE
    assert 1000 < len(pairs) < 1300 and clinc150.NONE == NONE


@pytest.mark.parametrize(
    "said", ["What can the voice control in this car do?", "How do I use the voice assistant while I'm driving?"]
)
def test_asking_what_the_car_can_do_in_the_cars_words_is_help(said):
    """Fails without the car's help examples (exemplars/car.tsv): its words ("car", "driving") made the model sure
    it was something the car cannot do."""
    reply = InCarAssistant().reply(said, CTX)
    assert reply.intent == "help" and reply.text == CAR_HELP


def test_nothing_heard_is_asked_again():
    for assistant in (DefaultAssistant(), InCarAssistant()):
        assert assistant.reply(" ... ", CTX).intent == "empty"
    assert IntentModel.for_profile("default").guess("").intent == NONE


def test_a_request_with_no_word_in_it_is_out_of_scope_not_a_crash():
    """Fails without the guard in IntentModel.guess: WordLlama's vector of no tokens is NaN, and the classifier
    raised on it ("Input X contains NaN") for text that is all punctuation or in another script."""
    for said in ("???", "你好吗", "¿¡"):
        assert IntentModel.for_profile("default").guess(said).intent == NONE
        for assistant in (DefaultAssistant(), InCarAssistant()):
            assert assistant.reply(said, CTX).intent in ("unknown", "empty"), said


def test_an_intents_own_words_count_wherever_they_stand():
    """An intent whose own words the request has (the policy's cues) is more likely, however long the preamble."""
    from agent.profiles.dialog import CUES, cued
    from agent.profiles.in_car import CAR_CUES

    said = normalise("I keep forgetting, is it the weekend already or not?")
    model = IntentModel.for_profile("default")
    plain, cue = model.guess(said), model.guess(said, cued(said, CUES))
    assert cue.intent == "date" and cue.score > plain.score
    said = normalise("My wife says the air con should be off now")
    car = IntentModel.for_profile("car")
    assert car.guess(said, cued(said, CAR_CUES)).score > car.guess(said).score
    reply = InCarAssistant().reply(said, CTX)
    assert reply.tool_calls[0]["name"] == "set_ac" and reply.tool_calls[0]["arguments"] == {"on": False}


@pytest.mark.parametrize(
    "said,arguments",
    [
        ("I'd like some sun, open up the roof panel.", {"position": 100}),
        ("Slide the sunroof shut.", {"position": 0}),
        ("Put my window back up.", {"window": "driver", "position": 0}),
        ("Let the window down halfway.", {"window": "driver", "position": 50}),
    ],
)
def test_which_way_a_window_or_the_roof_goes(said, arguments):
    reply = InCarAssistant().reply(said, CTX)
    assert reply.tool_calls[0]["arguments"] == arguments


def test_a_window_heard_without_which_way_is_asked_back_not_opened():
    """A window or the roof opens unless told to close (`car_intents._opening`): heard, a request with no word of
    which way is mostly one whose verb was misheard ("Window half made" for "windows up, mate" opened them all;
    heldout13 in noise, 5 windows opened that were asked closed), so it is asked back. Typed, it opens; and the
    verbs that open ("drop", "pop", "retract") say which way."""
    for said in ("Window half made.", "The back windows for the kids."):
        reply = InCarAssistant().reply(said, HEARD)
        assert reply.intent == "ask" and not reply.tool_calls and "open" in reply.text, (said, reply.text)
        assert InCarAssistant().reply(said, CTX).tool_calls[0]["arguments"]["position"] > 0  # typed: opened
    for said in ("Drop the passenger window.", "Pop the sunroof.", "Retract the moonroof."):
        reply = InCarAssistant().reply(said, HEARD)
        assert reply.intent == "tool" and reply.tool_calls[0]["arguments"]["position"] == 100, (said, reply.text)
    car = InCarAssistant()
    car.reply("Window half made.", HEARD)
    assert car.reply("Yes.", HEARD).tool_calls[0]["arguments"] == {"window": "driver", "position": 50}


def test_the_model_learns_requests_as_the_recogniser_hears_them():
    """Fails without the heard examples (exemplars/heard-*.tsv, made by benchmarks/heard_examples.py): Moonshine's
    near misses of a request, learnt with its intent, are taken for it; trained on the typed examples alone, not."""
    heard_as = [("car", "Open the door logs.", "doors"), ("default", "What's the hand count?", "count")]
    for profile, heard, intent in heard_as:
        assert IntentModel.for_profile(profile).guess(heard).intent == intent
        assert IntentModel(read_examples(profile)).guess(heard).intent != intent


@pytest.mark.parametrize("profile", ["default", "car"])
def test_every_heard_example_is_one_of_the_examples_as_heard(profile):
    """heard-*.tsv is made from the examples: one that was changed or removed since leaves a heard line behind
    (run `python -m benchmarks.heard_examples` again)."""
    own = {normalise(r) for _, r in read_examples(profile, shared=False)}
    text = resources.files("agent.profiles").joinpath("exemplars", f"heard-{profile}.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    assert len(rows) >= 300
    assert [said for _, _, said in rows if normalise(said) not in own] == []


def test_acts_on_says_what_reply_would_do_without_doing_it():
    """The second reading (agent/engines/cascade/second_reading.py) asks a policy whether it would act on a
    reading: the same answer as its reply to it heard (acted on or answered, not asked back, not out of scope),
    no effect."""
    said = [
        "What time is it?", "How late is it?", "What's the capital of France?", "Open the sunroof.",
        "Let some fresh air in through the roof.", "Then pre-chalp.", "Open the boot.", "Make it warmer.",
        "Drive me to", " ... ", "Call my wife",
    ]  # fmt: skip
    for make in (
        DefaultAssistant,
        InCarAssistant,
        lambda: InCarAssistant(IntentModel(read_examples("car"), sure=1.01)),
    ):
        for text in said:
            assistant = make()
            acts = assistant.acts_on(text)
            car = getattr(assistant, "car", None)
            before = car.state.snapshot() if car is not None else None
            assert assistant.acts_on(text) == acts and (car is None or car.state.snapshot() == before), text
            assert assistant.asked is None
            reply = make().reply(text, HEARD)  # the second reading asks it of what was heard
            assert acts == (reply.intent not in ("ask", "unknown", "empty")), (text, reply)
    near = DefaultAssistant(IntentModel(read_examples("default"), sure=1.01))
    assert not near.acts_on("Could you check the current time for me")  # only close: asked back
    assert near.reply("Could you check the current time for me", CTX).intent == "ask"
    assert near.acts_on("Yes.")  # ... and its answer is acted on


def test_the_vocabulary_is_the_words_requests_are_made_of():
    car, default = vocabulary("car"), vocabulary("default")
    assert {"window", "sunroof", "temperature", "fan", "seat heating", "air conditioning"} <= set(car)
    assert {"time", "date", "camera", "repeat"} <= set(default) and "window" not in default
    assert not {"the", "could", "please", "a"} & set(car)  # stop words every kind of speech has
