"""The user's side of a conversation, tick by tick: what every engine's `feed()` starts with.

Sans-I/O. Each 80 ms chunk: the camera frame, if one came, joins the recent
frames; the audio is endpointed (START / PAUSE / RESUME / END, see
`endpoint.py`) and recorded into the turn's utterance, with its pre-roll.
What an engine does at each event (speculate at a pause, answer at the
end) stays the engine's own.

Speech over the reply is judged, not assumed (when the profile allows
barge-in): its first voiced tick holds the reply (`Floor.held`: the framer
plays silence from its next 20 ms frame, keeping its place; a lone voiced
tick lets it go on at the next), and at its START the engine sees no
event. The session may hold it sooner, as the voice arrives within a tick
(`Floor.hold_early`); that tick's judgement here keeps the hold or lets it
go. Words that mean it (anything but a backchannel such as "mhm" or
"okay"), or speech that goes on
for `commit_ms`, cancel the reply: the engine then gets the START, with
`barge_in`, and the turn goes on as any other. A cough, a backchannel or
noise (speech that stops with no such words, `words_wait_ms` allowed for
the words to come) resumes the reply where it paused, and leaves no turn.
An engine that hears words says so with `heard()`, weighed where it was unsure
of them (the likelier of a backchannel or a stop saying decides); without
words, speech shorter than `confirm_without_words_ms` resumes.

A turn that began over a reply is heard (`audio()`, `spoken()`) as the echo
canceller's linear filter left it, where it gave one (`AlignedChunk.heard`):
AEC3's suppressor takes a voice's onset in the echo's tail for echo, and a
short utterance is then heard as whatever fits what is left of it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from media.aligner import AlignedChunk
from media.clock import TICK_MS
from media.endpoint import EndpointConfig, Endpointer, EndpointEvent, RecentFrames, Utterance, VoiceDetector

# Words that keep the floor with the speaker: said over a reply, they are not a turn.
BACKCHANNELS = frozenset(
    "mhm mm mmm hmm hm uh huh uhhuh um umm ah oh yeah yes yep yup ok okay right sure alright aha wow ha "
    "gotcha cool great nice true totally exactly indeed".split()
)


# How the recogniser writes a backchannel, and words that stop a speaker: where one of them is nearly as likely
# as what it heard over the reply, the likelier kind decides (see `TurnTaking.heard`)
BACKCHANNEL_SAYINGS = (
    "Mm-hmm.", "Mhm.", "Uh-huh.", "Hmm.", "Mm.", "Yeah.", "Okay.", "Yes.", "Right.", "Sure.", "Oh.", "Ah.",
)  # fmt: skip
STOP_SAYINGS = ("Stop.", "Wait.", "No.", "Hold on.", "Hang on.", "Excuse me.", "Sorry.", "What?")

STOP_WORDS = frozenset(
    "stop wait no nope hold hang pause cancel quiet enough hey excuse sorry what why how when where who help".split()
)
NOTHING, STOP, REQUEST = 0, 1, 2  # what words over the reply mean


@dataclass
class InterruptionConfig:
    judge: bool = True  # False: any speech over the reply cancels it at once
    commit_ms: int = 1200  # speech over the reply this long cancels it, whatever its words
    resume_silence_ms: int = 320  # speech over the reply has stopped after this much silence, not a mid-word gap
    words_wait_ms: int = 400  # ... and then how long its words may take to come
    confirm_without_words_ms: int = 560  # an engine that hears no words: speech this long cancels
    backchannels: frozenset[str] = field(default_factory=lambda: BACKCHANNELS)
    # Where a saying of either kind is at most `sayings_within` less likely than the words heard (natural log,
    # from the same audio: 2.5 is 12 times), the recogniser was unsure of them, and the likelier kind decides
    backchannel_sayings: tuple[str, ...] = BACKCHANNEL_SAYINGS
    stop_sayings: tuple[str, ...] = STOP_SAYINGS
    sayings_within: float = 2.5
    # Words beyond backchannels judged by what they mean, not how many they are: an engine that can tells
    # `heard()` how likely they are to be meant (a classifier of barge-ins and backchannels, trained on
    # examples: agent/profiles/interruption_words.py); this likely or more, they cancel once all was heard,
    # otherwise the reply goes on ("Interesting, go on." does not stop it, "Louder, please." does).
    # Without it: by count
    meant_from: float = 0.5
    words_model: bool = True
    # ... read only where the recogniser was sure enough of them: their log-likelihood per token (the end's
    # included) this low or lower, it guessed (over the echo, "yep" heard as "Thanks, Mom." at -1.09), and they
    # are taken for nothing said, though still weighed against the sayings. Over synthetic rooms words heard as
    # said scored -0.21 a token (median; -0.42 at the 10th percentile), heard otherwise -0.54 (-0.88); this much
    # judged the classifier's examples best (benchmarks/heard_interruptions.py)
    unsure_below: float = -1.0
    # Speech that cancels a reply this soon after the user's last turn ended goes on with that turn: its audio
    # leads the new turn's ("Repeat after me: ..." ended at the colon; the words after it cut the reply)
    continuation_ms: int = 1500


@dataclass
class Floor:
    """Whether the agent's reply is held while speech over it is judged, or cut; read by the output framer."""

    held: bool = False
    cut: bool = False  # the reply is cancelled: the framer drops what it holds at its next frame
    interruptions: int = 0  # speech over a reply: held
    resumed: int = 0  # ... judged a backchannel, a cough or noise: the reply went on
    confirmed: int = 0  # ... judged meant: the reply was cancelled
    continued: int = 0  # ... of those, the user going on with the turn just ended: its audio leads the new one
    blips: int = 0  # one voiced tick over the reply and no more: held for that tick only
    barge_in: bool = True  # speech may hold the reply at all (the profile's barge-in)
    detector_kind: type | None = None  # the kind of voice detector the ticks are judged by: the early hold's too
    # Held as the voice arrived, before its tick was whole (`hold_early`); the tick's own judgement then
    # keeps the hold or lets it go (`early_released`)
    early_tick: int | None = None
    early: int = 0
    early_released: int = 0
    # The held speech's words weighed against the sayings (passes); of those, taken for a backchannel though
    # they would have cancelled, or for a stop though they would not
    weighed: int = 0
    weighed_backchannel: int = 0
    weighed_stop: int = 0
    unread: int = 0  # passes whose words the recogniser guessed (`InterruptionConfig.unsure_below`): not read

    def hold_early(self, tick: int) -> None:
        """A voice heard over the reply within tick `tick`, before the tick is whole: silent from the next frame."""
        if not self.held:
            self.held = True
            self.early_tick = tick
            self.early += 1


@dataclass(frozen=True, slots=True)
class TurnStep:
    event: EndpointEvent | None
    barge_in: bool = False  # the user started talking over the reply: stop it
    hold: bool = False  # speech over the reply: it is held while judged (the floor says so)
    resumed: bool = False  # ... it was not meant: the reply goes on


@dataclass(frozen=True, slots=True)
class EndedTurn:
    audio: np.ndarray  # 16 kHz mono float32, cut as at the pause (see `Utterance`)
    speech_end_tick: int | None  # the last voiced tick
    end_tick: int  # the tick at which the end was detected


class TurnTaking:
    def __init__(
        self,
        config: EndpointConfig | None = None,
        detector: VoiceDetector | None = None,
        barge_in: bool = True,
        keep_frames: int = 8,
        interruptions: InterruptionConfig | None = None,
        hears_words: bool = False,
    ) -> None:
        self.endpointer = Endpointer(config, detector)
        self.utterance = Utterance()
        self.frames = RecentFrames(keep=keep_frames)
        self.barge_in = barge_in
        self.judging = interruptions or InterruptionConfig()
        self.hears_words = hears_words  # the engine calls heard() with what the held speech said
        self.floor = Floor(barge_in=barge_in, detector_kind=type(self.endpointer.detector))
        self.tick = 0
        self._held_at: int | None = None  # the tick the reply was held at
        self._voiced_ticks = 0  # voiced ticks of the held speech
        self._words: tuple[int, int] | None = None  # the latest words heard: what they meant, up to which tick
        self._ended = False  # the held speech's END came while it was judged
        self._end_next = False  # ... and the engine, given the START, gets it on the next tick
        self._tentative = False  # held at a voiced tick over the reply, before a START
        self._previous: tuple[np.ndarray, int] | None = None  # the last ended turn's audio and its end tick
        self._over_reply = False  # the turn began over the agent's reply: heard from the linear filter

    @property
    def held(self) -> bool:
        return self._held_at is not None

    @property
    def in_speech(self) -> bool:
        return self.endpointer.in_speech

    def feed(self, chunk: AlignedChunk, replying: Callable[[], bool] = lambda: False) -> TurnStep:
        """One tick. `replying` is asked only at a START: is the agent's reply still going?"""
        step = self._feed(chunk, replying)
        floor = self.floor
        if floor.early_tick is not None and chunk.tick >= floor.early_tick:
            floor.early_tick = None  # held before this tick was whole: its judgement stands now
            if floor.held and not (self._tentative or self.held or floor.cut):
                floor.held = False
                floor.early_released += 1
        return step

    def _feed(self, chunk: AlignedChunk, replying: Callable[[], bool]) -> TurnStep:
        self.tick = chunk.tick
        if chunk.video is not None:
            self.frames.add(chunk.tick, chunk.video.image)
        ep = self.endpointer
        voiced_before = ep.last_voiced_tick
        event = ep.update(chunk.tick, chunk.audio, chunk.echo, chunk.voice)
        self.utterance.add(chunk.audio, event, ep.in_speech, chunk.heard)
        if self._end_next:
            self._end_next = False
            return TurnStep(EndpointEvent.END)
        if self._held_at is not None:
            if ep.last_voiced_tick != voiced_before:
                self._voiced_ticks += 1
            self._ended = self._ended or event is EndpointEvent.END
            return self._judge_held()
        if self._tentative and event is not EndpointEvent.START:
            if ep.voiced_run == 0:  # one voiced tick, no more: the reply goes on (80 ms of it was silent)
                self._tentative = False
                self.floor.held = False
                self.floor.blips += 1
            return TurnStep(None)
        judged = self.barge_in and self.judging.judge
        if judged and event is None and ep.voiced_run and replying():
            self._tentative = True  # the first voiced tick over the reply holds it: a START may follow
            self.floor.held = True
            return TurnStep(None)
        if event is EndpointEvent.START and self.barge_in and (self._tentative or replying()):
            self._tentative = False
            self._over_reply = True
            if not self.judging.judge:
                self.floor.cut = True
                self._continue(chunk.tick)
                return TurnStep(event, barge_in=True)
            self._held_at = chunk.tick
            self._voiced_ticks = self.endpointer.config.start_ticks
            self._words = None
            self._ended = False
            self.floor.held = True
            self.floor.interruptions += 1
            return TurnStep(None, hold=True)
        return TurnStep(event)

    @property
    def sayings(self) -> tuple[str, ...]:
        """What an engine weighs the held speech's words against (`heard`'s `gaps`), in this order."""
        return self.judging.backchannel_sayings + self.judging.stop_sayings

    def unsure(self, text: str, meant: float | None = None) -> bool:
        """Whether these words over the reply are worth weighing against the sayings: more than backchannels, and
        with `meant` (see `heard`), no more than a saying's one or two words: three or more are read for what
        they say (a long text is less likely than a short one: "Oh, I did not know that." came within reach of
        "No.")."""
        words = self._words_in(text)
        return bool(words) and (meant is None or len(words) < 3)

    def heard(
        self,
        text: str,
        upto_tick: int,
        gaps: Sequence[float] | None = None,
        meant: float | None = None,
        sure: float | None = None,
    ) -> None:
        """What the held speech said, as heard from its start to `upto_tick`; `gaps`: how much less likely each
        of `sayings` was than `text`, from the same audio (the recogniser's `weigh`); `meant`: how likely the
        words are to be meant as an interruption, by what they say (see `InterruptionConfig.meant_from`);
        `sure`: how sure the recogniser was of them (see `InterruptionConfig.unsure_below`).

        Where a saying is nearly as likely as the words heard, the recogniser was unsure of them (a hum over
        the agent's echo heard as "And he came", "Stop" as "Daven", "Who are you" as "None"): the likelier
        kind of saying decides. The agent's own words heard back are not looked for here: the echo canceller
        keeps them out, and a user's question often repeats the reply's words ("how many people ...")."""
        if self._held_at is None:
            return
        as_heard = self._meaning(text, meant, sure)
        meaning = self._weighed(as_heard, text, gaps, meant)
        self.floor.unread += self._guessed(meant, sure) and bool(self._words_in(text))
        if gaps:
            self.floor.weighed += 1
            self.floor.weighed_backchannel += as_heard != NOTHING and meaning == NOTHING
            self.floor.weighed_stop += as_heard == NOTHING and meaning == STOP
        if meaning == REQUEST or self._words is None or upto_tick >= self._words[1]:
            self._words = (meaning, upto_tick)

    def meaning(
        self, text: str, gaps: Sequence[float] | None = None, meant: float | None = None, sure: float | None = None
    ) -> int:
        """What words over the reply mean: NOTHING (resume), STOP (cancel once all was heard) or REQUEST (cancel
        at once); with `gaps`, `meant` and `sure` (see `heard`), as weighed against the sayings and as meant."""
        return self._weighed(self._meaning(text, meant, sure), text, gaps, meant)

    def _weighed(self, meaning: int, text: str, gaps: Sequence[float] | None, meant: float | None) -> int:
        if gaps and self.unsure(text, meant):
            n = len(self.judging.backchannel_sayings)
            backchannel, stop = min(gaps[:n], default=math.inf), min(gaps[n:], default=math.inf)
            if min(backchannel, stop) <= self.judging.sayings_within:
                return max(meaning, STOP) if stop < backchannel else NOTHING
        return meaning

    def _guessed(self, meant: float | None, sure: float | None) -> bool:
        """Words the classifier read (`meant`) that the recogniser was too unsure of to be read."""
        return meant is not None and sure is not None and sure <= self.judging.unsure_below

    def _meaning(self, text: str, meant: float | None = None, sure: float | None = None) -> int:
        # Letters alone are how a hum is misheard ("M. A. K. M."); one or two other words are as likely a misheard
        # backchannel ("Mm hmm" as "Amend them") or a residue of the agent's voice as a request, which says more
        # (three words) while the reply is held and cancels it at once. A word that stops a speaker ("stop", "wait")
        # cancels it once the whole of what was said has been heard (a partial pass mishears the start of "okay").
        # With `meant`, what the words say decides, once all of them were heard: the start of a reaction may read
        # as a request ("Oh, I did" of "Oh, I did not know that."); words the recogniser guessed say nothing.
        words = self._words_in(text)
        if meant is not None and words:
            return NOTHING if meant < self.judging.meant_from or self._guessed(meant, sure) else STOP
        return REQUEST if len(words) >= 3 else STOP if any(w in STOP_WORDS for w in words) else NOTHING

    def _words_in(self, text: str) -> list[str]:
        said = [w for w in re.findall(r"[a-z']+", text.lower()) if w.strip("'")]
        return [w for w in said if len(w) > 1 and w not in self.judging.backchannels]

    def _judge_held(self) -> TurnStep:
        cfg, ep = self.judging, self.endpointer
        assert self._held_at is not None
        voiced_ms = self._voiced_ticks * TICK_MS
        words = self._words
        if words is not None and words[0] == REQUEST:
            return self._confirm()
        # Long speech cancels by its length alone only where no words say otherwise: speech heard as words that
        # ask nothing (a hum, a residue of the agent's echo, which stops with the held reply) does not.
        limit = cfg.commit_ms if self.hears_words else cfg.confirm_without_words_ms
        if words is None and voiced_ms >= limit:
            return self._confirm()
        over = self._ended or not ep.in_speech or ep.silent_ms >= cfg.resume_silence_ms
        if not over:
            return TurnStep(None)
        last = ep.last_voiced_tick if ep.last_voiced_tick is not None else self.tick
        if not self.hears_words:
            return self._resume()
        if words is not None and words[1] >= last:  # every word it said was heard
            return self._confirm() if words[0] == STOP else self._resume()
        if (self.tick - last) * TICK_MS - cfg.resume_silence_ms >= cfg.words_wait_ms:
            return self._resume()  # no words came: a cough, noise
        return TurnStep(None)

    def _confirm(self) -> TurnStep:
        assert self._held_at is not None
        self._continue(self._held_at)
        self._held_at = None
        self.floor.cut = True  # held until the framer drops the reply: the engine's cancel reaches it later
        self.floor.confirmed += 1
        self._end_next = self._ended
        return TurnStep(EndpointEvent.START, barge_in=True)

    def _continue(self, started: int) -> None:
        """Speech over the reply from tick `started` cancels it: if the user's last turn ended just before, it is
        that turn going on, and the new one starts with its audio (a short silence between)."""
        previous, self._previous = self._previous, None
        if previous is None or (started - previous[1]) * TICK_MS > self.judging.continuation_ms:
            return
        self.utterance.prepend(previous[0])
        self.floor.continued += 1

    def _resume(self) -> TurnStep:
        self._held_at = None
        self._over_reply = False
        self.floor.held = False
        self.floor.resumed += 1
        self.endpointer.abandon()
        self.utterance.clear()
        return TurnStep(None, resumed=True)

    def judge(self, pause: int, silence_ms: int) -> TurnStep:
        """A verdict on pause number `pause`: the silence that ends the turn; an END here ends it between ticks."""
        return TurnStep(self.endpointer.judge(pause, silence_ms))

    def audio(self) -> np.ndarray:
        """The turn so far, less the silence after its last voiced tick (the same cut at a pause and at the end)."""
        return self.utterance.audio(self.tick, self.endpointer.last_voiced_tick, heard=self._over_reply)

    def spoken(self) -> list[np.ndarray]:
        """The turn's ticks so far as the models should hear them, pre-roll included (see `audio`)."""
        return self.utterance.spoken(heard=self._over_reply)

    def tick_audio(self, chunk: AlignedChunk) -> np.ndarray:
        """This tick as the models should hear it: for an engine that streams the turn on (a Realtime server)."""
        return chunk.heard if self._over_reply and chunk.heard is not None else chunk.audio

    def images(self) -> list[np.ndarray]:
        """The camera's frames of the last few seconds, oldest first; none when it is off."""
        return self.frames.fresh(self.tick)

    def end(self) -> EndedTurn:
        """Take the ended turn's audio; the next turn records afresh."""
        turn = EndedTurn(self.audio(), self.endpointer.last_voiced_tick, self.tick)
        self.utterance.clear()
        self._over_reply = False
        self._previous = (turn.audio, self.tick)
        return turn
