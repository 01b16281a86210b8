"""A spoken corpus nobody tuned to: what voice-to-voice figures are measured on.

78 utterances (questions, commands, statements, camera questions; 1-6 s),
16 of them with a hesitation in mid-sentence ("|": 0.6-1.2 s of silence),
each spoken by one of five voices (the bundled hibari voice and four
espeak-ng voices of both sexes and several accents, 145-195 words a minute),
clean or under road noise 10 dB below the voiced speech. None of the phrases
is one the code's tests, policies or other benchmarks use; a figure measured
here is a figure on speech the code has not heard.

A hesitation is rendered as the first part said with a continuing (comma)
intonation, an exact silence, then the rest, so the corpus controls how long
the user pauses. Road noise (`road_noise`) is shaped like a car cabin's: most
of its energy below 200 Hz, a pink tail above, seeded per session.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from dataclasses import dataclass
from functools import cache

import numpy as np

from media.pcm import StreamResampler

RATE = 48_000  # what the clients send
LOUD = 0.01  # a sample above this (of the clean speech) is voiced: where an utterance ends
NOISE_SNR_DB = 10.0


@dataclass(frozen=True)
class Voice:
    name: str
    engine: str  # "hibari" | "espeak"
    espeak: str = ""  # espeak-ng voice
    wpm: int = 0
    sex: str = ""


VOICES = (
    Voice("hibari", "hibari", sex="f"),
    Voice("espeak-us-m-165", "espeak", "en-us", 165, "m"),
    Voice("espeak-scotland-f-180", "espeak", "en-gb-scotland+f2", 180, "f"),
    Voice("espeak-rp-m-145", "espeak", "en-gb-x-rp+m3", 145, "m"),
    Voice("espeak-us-f-195", "espeak", "en-us+f4", 195, "f"),
)


@dataclass(frozen=True)
class Entry:
    text: str  # "|" marks a hesitation
    kind: str  # question | command | statement | camera
    profile: str = "default"

    @property
    def said(self) -> str:
        return " ".join(self.text.replace("|", " ").split())

    @property
    def parts(self) -> list[str]:
        return [p.strip() for p in self.text.split("|")]


E = Entry
ENTRIES = (
    # questions the default assistant knows, said in ways it was not written for
    E("What's the time right now?", "question"),
    E("Do you know what day it is today?", "question"),
    E("Could you tell me today's date, please?", "question"),
    E("Sorry to interrupt, but what time do you have?", "question"),
    E("Which day of the week is it?", "question"),
    E("What are you able to help me with?", "question"),
    E("Who are you, and what do you do?", "question"),
    E("What's the date today?", "question"),
    E("Could you remind me what the date is, I need to write it on a form for the bank this afternoon.", "question"),
    # questions it has no skill for
    E("Is it still morning, or is it already the afternoon?", "question"),
    E("How far away is the moon from the earth?", "question"),
    E("What is the capital city of Australia?", "question"),
    E("Why is the sky blue during the day?", "question"),
    E("How do I make a really good cup of tea?", "question"),
    E("Can you recommend a good book for a long train journey?", "question"),
    E("What's the weather going to be like tomorrow afternoon?", "question"),
    E("Is there anything you can do to help me plan my week?", "question"),
    E("I was wondering if you could tell me what the date is today, because I have completely lost track.", "question"),
    # the camera (on, showing one face)
    E("Can you see me right now?", "camera"),
    E("How many people are in the room with me?", "camera"),
    E("Do you see anyone behind me?", "camera"),
    E("Tell me, how many faces can you spot on the camera?", "camera"),
    E("Am I on camera at the moment?", "camera"),
    E("Can you see my face clearly?", "camera"),
    E("How many people do you think are sitting here?", "camera"),
    E("Hey, can you see us both?", "camera"),
    # statements and small talk
    E("My name is Alex and I work as a nurse.", "statement"),
    E("I just got back from a long walk by the river.", "statement"),
    E("It's been raining all day here, and I'm tired of it.", "statement"),
    E("Thanks a lot, that was really helpful.", "statement"),
    E("I think I'll have pasta for dinner tonight.", "statement"),
    E("Good morning to you.", "statement"),
    E("The meeting got moved to Thursday afternoon.", "statement"),
    E("Okay, that's all for now, goodbye.", "statement"),
    E("Hi there, good evening.", "statement"),
    E("Thank you so much.", "statement"),
    E("Please repeat after me, green apples are sweet.", "statement"),
    E("Say that again, please.", "statement"),
    E("So my daughter asked me this morning why the leaves change colour in autumn, and I had no idea.", "statement"),
    E("My brother is coming to visit next weekend and I need to remember to clean the spare room.", "statement"),
    # in the car
    E("Open the window on the driver's side.", "command", "in_car"),
    E("Please close all the windows.", "command", "in_car"),
    E("Turn the heating up a little bit.", "command", "in_car"),
    E("Could you make it cooler in here?", "command", "in_car"),
    E("Set the fan to the highest setting.", "command", "in_car"),
    E("Open the sunroof halfway, please.", "command", "in_car"),
    E("Lower the passenger window a bit.", "command", "in_car"),
    E("Switch off the seat heating.", "command", "in_car"),
    E("Lock the car doors.", "command", "in_car"),
    E("Unlock the doors, please.", "command", "in_car"),
    E("Play something relaxing on the radio.", "command", "in_car"),
    E("Skip to the next song.", "command", "in_car"),
    E("Turn the music up.", "command", "in_car"),
    E("Take me to the closest petrol station.", "command", "in_car"),
    E("Find a route home that avoids the motorway.", "command", "in_car"),
    E("Warm up the passenger seat.", "command", "in_car"),
    E("Stop the music.", "command", "in_car"),
    E("Set the air conditioning to twenty two degrees.", "command", "in_car"),
    E("Shut the sunroof.", "command", "in_car"),
    E(
        "I'd like it a bit warmer in here and the fan a little quieter, because my feet are getting cold.",
        "command",
        "in_car",
    ),
    E(
        "If it's not too much trouble, please open the sunroof and the front windows for some fresh air.",
        "command",
        "in_car",
    ),
    E(
        "When you get a moment, could you open the rear windows and then turn the fan down a little?",
        "command",
        "in_car",
    ),
    # a hesitation in mid-sentence
    E("Set the temperature to | twenty one degrees.", "command", "in_car"),
    E("Could you open the | rear left window?", "command", "in_car"),
    E("I would like to go to | the train station.", "command", "in_car"),
    E("Turn the volume down and | switch to the next station.", "command", "in_car"),
    E("Please set the fan speed to | three.", "command", "in_car"),
    E("Navigate to | the nearest supermarket, please.", "command", "in_car"),
    E("Turn on the seat heating for | the passenger.", "command", "in_car"),
    E("Set the temperature to twenty | four degrees.", "command", "in_car"),
    E("Open the window | just a little bit.", "command", "in_car"),
    E("Can you tell me the | date today?", "question"),
    E("What I really want to know is | what time it is.", "question"),
    E("Remind me, um, | what day of the week is it?", "question"),
    E("How many people can you | see in the picture?", "camera"),
    E("I'm looking for a good place to eat | near the city centre.", "statement"),
    E("My sister and | her husband are coming for dinner.", "statement"),
    E("Could you tell me if | it's already past noon?", "question"),
)
PAUSES_S = (0.6, 0.8, 1.0, 1.2)


@dataclass
class Clip:
    entry: Entry
    voice: Voice
    audio: np.ndarray  # 48 kHz mono float32, clean, 0.2 s of silence before and 0.1 s after
    last_voiced: int  # the last voiced sample
    pause_s: float  # the hesitation's silence (0: none)

    @property
    def seconds(self) -> float:
        return self.audio.size / RATE


def clips(limit: int | None = None) -> list[Clip]:
    """Every entry in its voice (entry i: voice i mod 5; hesitation j: PAUSES_S[j mod 4])."""
    out = []
    hesitations = 0
    for i, entry in enumerate(ENTRIES[:limit]):
        voice = VOICES[i % len(VOICES)]
        pause = 0.0
        if len(entry.parts) > 1:
            pause = PAUSES_S[hesitations % len(PAUSES_S)]
            hesitations += 1
        audio = speak(entry, voice, pause)
        out.append(Clip(entry, voice, audio, int(np.flatnonzero(np.abs(audio) > LOUD)[-1]), pause))
    return out


def speak(entry: Entry, voice: Voice, pause_s: float) -> np.ndarray:
    parts = entry.parts
    rendered = [_trim(_say(p + ("," if i < len(parts) - 1 else ""), voice)) for i, p in enumerate(parts)]
    gap = np.zeros(int(pause_s * RATE), np.float32)
    pieces: list[np.ndarray] = [np.zeros(RATE // 5, np.float32)]
    for i, r in enumerate(rendered):
        if i:
            pieces.append(gap)
        pieces.append(r)
    pieces.append(np.zeros(RATE // 10, np.float32))
    return np.concatenate(pieces)


def _trim(pcm: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm) > LOUD)
    return pcm[loud[0] : loud[-1] + 1] if loud.size else pcm[:0]


def _say(text: str, voice: Voice) -> np.ndarray:
    """`text` in `voice`, at 48 kHz, peak 0.8 (both engines)."""
    if voice.engine == "hibari":
        tts = _hibari()
        pcm, rate = np.concatenate(list(tts.stream(text))), tts.rate
    else:
        espeak = shutil.which("espeak-ng")
        if espeak is None:
            raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
        cmd = [espeak, "-v", voice.espeak, "-s", str(voice.wpm), "--stdout", text]
        with wave.open(io.BytesIO(subprocess.run(cmd, check=True, capture_output=True).stdout)) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
            rate = w.getframerate()
    rs = StreamResampler(rate, RATE, quality="HQ")
    out = np.concatenate([rs.process(pcm.astype(np.float32)), rs.process(np.zeros(0, np.float32), last=True)])
    return (out * (0.8 / max(1e-6, float(np.abs(out).max())))).astype(np.float32)


@cache
def _hibari():  # noqa: ANN202 - the synthesizer, loaded once
    from agent.engines.cascade.models import Synthesizer

    return Synthesizer()


def road_noise(seconds: float, seed: int, rate: int = RATE) -> np.ndarray:
    """Unit-RMS cabin noise: a rumble falling 12 dB an octave above 150 Hz over a pink floor 15 dB below it."""
    n = int(seconds * rate)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / rate)
    f[0] = 1.0
    rumble = 1.0 / (1.0 + (f / 150.0) ** 2)
    pink = 10 ** (-15 / 20) * np.sqrt(150.0 / np.maximum(f, 20.0))
    shaped = spectrum * (rumble + pink) * (f > 20)
    noise = np.fft.irfft(shaped, n)
    return (noise / np.sqrt(np.mean(noise**2))).astype(np.float32)


def under_road_noise(audio: np.ndarray, snr_db: float, seed: int, rate: int = 16_000) -> np.ndarray:
    """`audio` with road noise `snr_db` below its voiced part's level (samples over 0.02)."""
    loud = audio[np.abs(audio) > 0.02]
    level = float(np.sqrt(np.mean(loud**2))) * 10 ** (-snr_db / 20) if loud.size else 0.0
    return (audio + road_noise((audio.size + 16) / rate, seed=seed, rate=rate)[: audio.size] * level).astype(np.float32)


def noise_level(clip_list: list[Clip], snr_db: float = NOISE_SNR_DB) -> float:
    """The noise RMS that is `snr_db` below the corpus's voiced speech."""
    voiced = np.concatenate([c.audio[np.abs(c.audio) > LOUD] for c in clip_list])
    return float(np.sqrt(np.mean(voiced**2)) * 10 ** (-snr_db / 20))


def summary(clip_list: list[Clip]) -> dict:
    """What the corpus holds, for the benchmark's JSON."""
    secs = [c.last_voiced / RATE - 0.2 for c in clip_list]
    return {
        "utterances": len(clip_list),
        "kinds": {k: sum(c.entry.kind == k for c in clip_list) for k in ("question", "command", "statement", "camera")},
        "hesitations": sum(c.pause_s > 0 for c in clip_list),
        "voices": {v.name: sum(c.voice == v for c in clip_list) for v in VOICES},
        "speech_seconds": {
            "min": round(min(secs), 2),
            "median": round(float(np.median(secs)), 2),
            "max": round(max(secs), 2),
        },
    }
