"""TurnTaking: the opening of every engine's feed(), on a scripted tick stream."""

from __future__ import annotations

import numpy as np

from media.aligner import AlignedChunk, VideoSample
from media.clock import INPUT_SAMPLES_PER_TICK
from media.endpoint import EndpointConfig, EndpointEvent
from media.turn_taking import InterruptionConfig, TurnTaking

LOUD = np.full(INPUT_SAMPLES_PER_TICK, 0.3, np.float32)
QUIET = np.zeros(INPUT_SAMPLES_PER_TICK, np.float32)


def chunk(tick: int, audio: np.ndarray, image: np.ndarray | None = None) -> AlignedChunk:
    video = VideoSample(image, tick * 0.08, tick * 0.08, "exact") if image is not None else None
    return AlignedChunk(tick, audio, video)


def run(turns: TurnTaking, pattern: str, replying: bool = False, start: int = 0) -> dict[int, EndpointEvent]:
    """'x' a voiced tick, '.' a silent one; the ticks at which something happened."""
    got = {}
    for i, c in enumerate(pattern, start):
        step = turns.feed(chunk(i, LOUD if c == "x" else QUIET), lambda: replying)
        if step.event is not None:
            got[i] = step.event
        if step.barge_in:
            got[-i] = "barge_in"
        if step.hold:
            got[-i] = "hold"
        if step.resumed:
            got[-i] = "resumed"
    return got


def test_events_and_the_turns_audio():
    turns = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    events = run(turns, "...xxxx......")
    assert events == {4: EndpointEvent.START, 8: EndpointEvent.PAUSE, 12: EndpointEvent.END}
    ended = turns.end()
    assert (ended.speech_end_tick, ended.end_tick) == (6, 12)
    # pre-roll (3 ticks before the start tick), the voice, and a 3-tick tail after the last voiced tick
    assert ended.audio.size == (6 + 3 - 1 + 1) * INPUT_SAMPLES_PER_TICK
    assert turns.end().audio.size == 0  # taken: the next turn records afresh


def test_barge_in_only_while_replying_and_where_the_profile_allows():
    unjudged = InterruptionConfig(judge=False)
    assert run(TurnTaking(interruptions=unjudged), "...xx", replying=True) == {4: EndpointEvent.START, -4: "barge_in"}
    assert -4 not in run(TurnTaking(interruptions=unjudged), "...xx", replying=False)
    assert -4 not in run(TurnTaking(barge_in=False), "...xx", replying=True)
    assert run(TurnTaking(), "...xx", replying=True) == {-4: "hold"}  # judged: held first, the engine sees nothing


def test_the_first_voiced_tick_over_the_reply_holds_it_and_a_lone_one_lets_it_go_on():
    turns = TurnTaking()
    held = []
    for i, c in enumerate("...x...xx"):
        step = turns.feed(chunk(i, LOUD if c == "x" else QUIET), lambda: True)
        held.append(turns.floor.held)
        assert step.event is None
    assert held == [False, False, False, True, False, False, False, True, True]
    assert turns.floor.blips == 1 and turns.floor.interruptions == 1  # the second run made a START: judged


def test_speech_over_the_reply_without_words_of_its_own_is_judged_by_its_length():
    """An engine that hears no words: a short sound (a cough, "mhm") resumes the reply and leaves no turn;
    speech as long as `confirm_without_words_ms` cancels it and becomes the turn."""
    turns = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    got = run(turns, "...xxx........", replying=True)
    # held at the START (tick 4), resumed once it had been silent for 320 ms (4 ticks after tick 5)
    assert got == {-4: "hold", -9: "resumed"}, got
    assert not turns.floor.held and (turns.floor.interruptions, turns.floor.resumed) == (1, 1)
    assert not turns.in_speech and turns.audio().size == 0  # no turn was left behind
    long = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    got = run(long, "...xxxxxxxx......", replying=True)
    # 560 ms of voice (7 ticks from its start at tick 3): cancelled, the engine gets the START, then the turn
    assert got == {-4: "hold", 9: EndpointEvent.START, -9: "barge_in", 12: EndpointEvent.PAUSE, 16: EndpointEvent.END}
    assert long.floor.confirmed == 1 and long.floor.cut  # the framer drops the reply at its next frame
    assert long.end().audio.size >= 8 * INPUT_SAMPLES_PER_TICK  # the turn from its real start, pre-roll too


def feed_pattern(
    turns: TurnTaking,
    pattern: str,
    start: int = 0,
    heard: dict[int, str] | None = None,
    gaps: list[float] | None = None,
    meant: dict[str, float] | None = None,
    sure: float | None = None,
):
    """Like run(), with the engine's words: at tick i, `heard[i]` is what the held speech said so far (each of the
    sayings `gaps` less likely; `meant[text]` how likely it means to interrupt; `sure`, the recogniser's sureness)."""
    got = {}
    for i, c in enumerate(pattern, start):
        if heard and i in heard:
            tick = turns.endpointer.last_voiced_tick or i
            turns.heard(heard[i], tick, gaps, (meant or {}).get(heard[i]), sure)
        step = turns.feed(chunk(i, LOUD if c == "x" else QUIET), lambda: True)
        for flag in ("hold", "resumed", "barge_in"):
            if getattr(step, flag):
                got[-i] = flag
        if step.event is not None:
            got[i] = step.event
    return got


def words_turns() -> TurnTaking:
    return TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480), hears_words=True)


def test_words_over_the_reply_decide():
    # a backchannel, heard once the sound stopped: the reply goes on at once
    turns = words_turns()
    assert feed_pattern(turns, "...xxx.....", heard={7: "Mhm."}) == {-4: "hold", -9: "resumed"}
    # "stop" cancels once all of it was heard (its pause swallowed while it was judged); heard only in part, it
    # waits for the rest
    turns = words_turns()
    got = feed_pattern(turns, "...xxxx.......", heard={5: "Stop", 8: "Stop."})
    assert got == {-4: "hold", 10: EndpointEvent.START, -10: "barge_in", 12: EndpointEvent.END}, got
    # a question heard only after the sound ended still becomes the turn: START now, its END on the next tick
    turns = words_turns()
    got = feed_pattern(turns, "...xxx........", heard={12: "What time is it"})
    assert got[12] is EndpointEvent.START and got[-12] == "barge_in" and got[13] is EndpointEvent.END, got
    assert turns.end().audio.size >= 5 * INPUT_SAMPLES_PER_TICK
    # no words at all within words_wait_ms after the pause: a cough or noise
    turns = words_turns()
    got = feed_pattern(turns, "...xxx............", heard={7: ""})
    assert got == {-4: "hold", -9: "resumed"}, got
    turns = words_turns()
    got = feed_pattern(turns, "...xxx............")  # the hearer never answered
    assert got == {-4: "hold", -14: "resumed"}, got  # 320 ms of silence + 400 ms for the words: 5 + 4 + 5
    # long speech whose words come to nothing (a hum, the reply's echo misheard) does not cancel by its length
    turns = words_turns()
    got = feed_pattern(turns, "...xxxxxxxxxxxxxxxxx.........", heard={6: "Mm", 12: "hmm", 20: "Mm hmm"})
    assert got == {-4: "hold", -23: "resumed"}, got
    # a lone word that stops nothing is no request
    turns = words_turns()
    assert feed_pattern(turns, "...xxx.....", heard={7: "Uh, I"}) == {-4: "hold", -9: "resumed"}


def test_words_the_recogniser_was_unsure_of_are_judged_by_the_likelier_kind_of_saying():
    """A hum over the agent's echo heard as "And he came", "Stop" as "Stop it", "Who are you" as "None": where a
    saying is nearly as likely as the words heard, the likelier kind (a backchannel, a stop) decides."""

    def gaps(turns: TurnTaking, backchannel: float, stop: float) -> list[float]:
        n = len(turns.judging.backchannel_sayings)
        return [backchannel] * n + [stop] * (len(turns.sayings) - n)

    def judged(text: str, backchannel: float, stop: float, turns: TurnTaking | None = None) -> str:
        turns = turns or words_turns()
        got = feed_pattern(turns, "...xxx.....", heard={7: text}, gaps=gaps(turns, backchannel, stop))
        return "resumed" if "resumed" in got.values() else "barge_in" if "barge_in" in got.values() else str(got)

    turns = words_turns()
    assert turns.unsure("And he came.") and turns.unsure("None.") and not turns.unsure("Mm, yeah.")
    assert judged("And he came.", 1.6, 6.0) == "resumed"
    assert judged("And he came.", 9.0, 9.0) == "barge_in"  # said clearly: its words decide
    assert judged("So what?", 0.3, 4.0) == "resumed"  # "Sure." misheard
    assert judged("Stop it.", 1.3, -0.1) == "barge_in"
    assert judged("None.", 3.3, 2.0) == "barge_in"  # heard as nothing that stops, but a stop was nearly as likely
    assert judged("None.", 3.3, 4.0) == "resumed"
    assert judged("And he came.", 2.0, 1.0) == "barge_in"  # a request nearest a stop still cancels
    # where the recogniser cannot tell (no gaps), the words alone decide
    assert feed_pattern(words_turns(), "...xxx.....", heard={7: "And he came."})[-7] == "barge_in"
    turns = words_turns()  # counted: weighed, and swayed either way
    for text, backchannel, stop in (("What time is it?", 1.6, 6.0), ("None.", 3.3, 2.0)):  # resumed, then cut
        feed_pattern(turns, "...xxx.....", heard={7: text}, gaps=gaps(turns, backchannel, stop))
    assert (turns.floor.weighed, turns.floor.weighed_backchannel, turns.floor.weighed_stop) == (2, 1, 1)
    within = InterruptionConfig(sayings_within=1.0)
    strict = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480), hears_words=True, interruptions=within)
    assert judged("And he came.", 1.6, 6.0, strict) == "barge_in"


def test_recent_camera_frames():
    turns = TurnTaking(keep_frames=2)
    frames = [np.full((2, 2, 3), i, np.uint8) for i in range(3)]
    for i, f in enumerate(frames):
        turns.feed(chunk(i, QUIET, f))
    assert [int(f[0, 0, 0]) for f in turns.images()] == [1, 2]  # the last two kept, oldest first
    for t in range(3, 60):
        turns.feed(chunk(t, QUIET))
    assert turns.images() == []  # nothing fresh: the camera is off


def test_a_misheard_backchannel_resumes_and_a_request_of_three_words_cancels():
    # how Moonshine hears espeak-ng's "Mm hmm" and "Mhm": not words that ask for anything
    for misheard in ("Amend them.", "M. A. K. M.", "Ok, ok."):
        turns = words_turns()
        assert feed_pattern(turns, "...xxx.....", heard={7: misheard}) == {-4: "hold", -9: "resumed"}, misheard
    turns = words_turns()
    got = feed_pattern(turns, "...xxxxxx.......", heard={8: "Open the window"})
    assert got[-8] == "barge_in" and got[8] is EndpointEvent.START


def test_words_are_judged_by_what_they_mean_where_the_engine_says_so_not_by_how_many():
    """With `meant` (the interruption classifier's probability), a reaction of many words resumes and a short
    request cancels, where counting words gets both wrong; backchannel words alone still need no verdict."""

    def judged(text: str, meant: float | None) -> str:
        got = feed_pattern(words_turns(), "...xxx.........", heard={7: text}, meant={text: meant})
        return "resumed" if "resumed" in got.values() else "barge_in" if "barge_in" in got.values() else str(got)

    assert judged("Huh, I didn't know that.", None) == "barge_in"  # three words: a request, by count
    assert judged("Huh, I didn't know that.", 0.1) == "resumed"
    assert judged("Louder, please.", None) == "resumed"  # two words, no stop word
    assert judged("Louder, please.", 0.9) == "barge_in"
    assert judged("No way!", None) == "barge_in"  # "no" stops, by the word
    assert judged("No way!", 0.2) == "resumed"
    assert judged("Mm, okay.", 0.99) == "resumed"  # backchannel words alone: nothing to judge
    # words meant cancel once all of them were heard, however many: the start of a reaction may read as a request
    turns = words_turns()
    said = {5: "Louder", 8: "Louder, please."}
    got = feed_pattern(turns, "...xxxx.......", heard=said, meant=dict.fromkeys(said.values(), 0.9))
    assert -5 not in got and got[-10] == "barge_in", got
    turns = words_turns()
    said = {5: "Oh, I did", 9: "Oh, I did not know that."}
    got = feed_pattern(turns, "...xxxxx.........", heard=said, meant={said[5]: 0.8, said[9]: 0.1})
    assert got == {-4: "hold", -11: "resumed"}, got


def test_words_the_recogniser_guessed_are_not_read_for_what_they_mean():
    """Over the echo, "yep" was heard as "Thanks, Mom." at -1.09 a token (benchmarks/heard_interruptions.py): words
    heard that unsurely say nothing, whatever the classifier makes of them, though a saying weighed likelier decides."""
    text = "Thanks, Mom."

    def judged(sure: float | None, gaps: list[float] | None = None) -> tuple[str, int]:
        turns = words_turns()
        got = feed_pattern(turns, "...xxx.........", heard={7: text}, gaps=gaps, meant={text: 0.9}, sure=sure)
        verdict = "resumed" if "resumed" in got.values() else "barge_in" if "barge_in" in got.values() else str(got)
        return verdict, turns.floor.unread

    cfg = InterruptionConfig()
    assert judged(None) == ("barge_in", 0)  # no sureness given: read
    assert judged(cfg.unsure_below + 0.5) == ("barge_in", 0)
    assert judged(cfg.unsure_below - 0.2) == ("resumed", 1)
    # weighed: "Stop." (the first stop saying) nearly as likely as what was heard, far likelier than a backchannel
    stop_likelier = [9.0] * len(cfg.backchannel_sayings) + [1.0] + [9.0] * (len(cfg.stop_sayings) - 1)
    assert judged(cfg.unsure_below - 0.2, stop_likelier) == ("barge_in", 1)


def test_a_turn_begun_over_the_reply_is_heard_as_the_linear_filter_left_it():
    """`AlignedChunk.heard` (speex's linear filter, where AEC3 cancelled): speech over a reply is recognised
    from it, pre-roll included; any other turn from the tick's audio as the engine got it."""
    heard = np.full(INPUT_SAMPLES_PER_TICK, 0.7, np.float32)

    def feed(turns: TurnTaking, pattern: str, replying: bool, start: int = 0) -> None:
        for i, c in enumerate(pattern, start):
            turns.feed(AlignedChunk(i, LOUD if c == "x" else QUIET, heard=heard), lambda: replying)

    over = words_turns()
    feed(over, "..xxx", replying=True)
    assert over.held and np.all(over.audio() == 0.7) and len(over.spoken()) == 5  # the pre-roll too
    assert over.tick_audio(AlignedChunk(5, LOUD, heard=heard)) is heard
    over.heard("What time is it?", 4)
    feed(over, "xx", replying=True, start=5)  # cancelled: the turn it starts goes on being heard so
    assert not over.held and np.all(over.audio() == 0.7)
    over.end()
    assert over.tick_audio(AlignedChunk(9, LOUD, heard=heard)) is not heard  # the next turn afresh
    plain = words_turns()
    feed(plain, "..xxx", replying=False)
    assert plain.in_speech and np.all(plain.audio()[-INPUT_SAMPLES_PER_TICK:] == 0.3)
    resumed = words_turns()  # a backchannel over the reply: resumed, and the next turn is heard plainly
    feed_pattern(resumed, "...xxx.....", heard={7: "Mhm."})
    feed(resumed, "..xxx", replying=False, start=11)
    assert np.all(resumed.audio()[-INPUT_SAMPLES_PER_TICK:] == 0.3)


def test_the_agents_voice_coming_back_is_not_speech_over_the_reply():
    """A tick the echo canceller marks as the agent's own voice (`AlignedChunk.echo`) is heard by the
    detector but is not speech: it neither holds the reply nor starts a turn."""
    turns = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    for i in range(3, 9):
        step = turns.feed(AlignedChunk(i, LOUD, echo=True), lambda: True)
        assert step.event is None and not turns.floor.held
    assert turns.floor.interruptions == 0 and not turns.in_speech
    assert run(turns, "xx", replying=True, start=9) == {-10: "hold"}  # the user's own voice still is


def test_a_voice_the_canceller_found_over_the_echo_holds_the_reply_before_the_detector_hears_it():
    """A tick the echo canceller found a voice in (`AlignedChunk.voice`) is speech though the detector hears none
    in what the canceller left, and though the tick was mostly the echo: the reply is held at it, and with the
    detector's voiced tick after it the speech has started."""
    turns = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    run(turns, "...", replying=True)
    step = turns.feed(AlignedChunk(3, QUIET, echo=True, voice=True), lambda: True)
    assert step.event is None and turns.floor.held
    step = turns.feed(AlignedChunk(4, LOUD), lambda: True)
    assert step.hold and turns.floor.interruptions == 1
    without = TurnTaking(EndpointConfig(pause_ms=160, end_silence_ms=480))
    run(without, "...", replying=True)
    without.feed(AlignedChunk(3, QUIET, echo=True), lambda: True)
    assert not without.floor.held


def test_speech_that_cuts_the_reply_just_after_a_turn_continues_that_turn():
    """ "Repeat after me: ..." ended at the colon, and the words after it cut the reply: the new turn starts with
    the audio of the one just ended; a barge-in later than `continuation_ms` after it starts afresh."""
    cfg = EndpointConfig(pause_ms=160, end_silence_ms=480)
    sizes, continued = {}, {}
    for gap in (3, 25):
        turns = TurnTaking(cfg, interruptions=InterruptionConfig(confirm_without_words_ms=400))
        run(turns, "...xxxxx......")
        first = turns.end().audio
        got = run(turns, "." * gap + "xxxxxxxx", replying=True, start=14)
        assert EndpointEvent.START in got.values() and "barge_in" in got.values()
        sizes[gap], continued[gap] = turns.audio().size, turns.floor.continued
    assert continued == {3: 1, 25: 0}
    assert sizes[3] == first.size + 2 * INPUT_SAMPLES_PER_TICK + sizes[25]  # the turn, 160 ms of silence, the new
