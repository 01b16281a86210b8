"""Make `agent/profiles/exemplars/heard-<profile>.tsv`: the intent model's examples as the recogniser hears them.

The model learns from its examples as typed, but a spoken request reaches it as Moonshine heard it: "A C off",
"sun roof", "the little rainbow sails". Each example is said by one of three espeak-ng voices that no
benchmark speaks with, clean or under road noise 12 dB below it (alternately), and recognised by Moonshine
base-en; where what was heard is a near miss of what was said (not the same, its letters at least `NEAR`
alike by difflib's ratio, and not a request of a benchmark corpus), it is one more example of the same
intent. Heard further off ("They be strong players, I can barely say." for "demister on please, I can
barely see") it taught the model that anything may be a request: out of scope said so fell from 91.5 to 85 %
of the car's corpus (typed). Run it again when the examples change:

    python -m benchmarks.heard_examples [--profiles default car]

Deterministic for a given espeak-ng and Moonshine (a noise seed per example); about 0.15 s an example.
"""

from __future__ import annotations

import argparse
import difflib
import time
from pathlib import Path

import numpy as np

import agent.profiles
from agent.engines.cascade.models import Recognizer, moonshine_recognizer
from agent.profiles.understanding import normalise, read_examples
from benchmarks.corpus import under_road_noise
from benchmarks.harness import espeak_rendering
from benchmarks.understanding import CORPUS, NAMES, read_corpus

# Voices the benchmarks do not speak with (understanding.py's ESPEAK, conversation.py's, held_words.py's)
VOICES = [("en-gb-x-gbcwmd", 165), ("en-029", 160), ("en-us-nyc", 170)]
SNR_DB = 12.0
NEAR = 0.8
HEADER = (
    "# The examples of {profile}.tsv as Moonshine base-en heard them said by espeak-ng (voices {voices}, clean or\n"
    "# under road noise {snr:g} dB below, alternately): made by `python -m benchmarks.heard_examples`, not by hand.\n"
    "# label<TAB>heard<TAB>said; only near misses (letters at least {near:g} alike by difflib's ratio)\n"
)


def corpora_requests() -> set[str]:
    """Every request of the benchmark corpora: a heard example must not be one (they are measured on)."""
    said = set()
    for profile in CORPUS:
        for corpus in NAMES:
            said |= {normalise(text) for _, text in read_corpus(profile, corpus)}
    return said


def near_miss(heard: str, said: str) -> bool:
    a, b = normalise(heard), normalise(said)
    return bool(a) and a != b and difflib.SequenceMatcher(None, a, b).ratio() >= NEAR


def said(n: int, request: str, snr_db: float = SNR_DB, seed: int = 10_000) -> np.ndarray:
    """The `n`-th example as these voices say it, in turn: clean, or (odd `n`) under road noise `snr_db` below."""
    voice, speed = VOICES[n % len(VOICES)]
    audio = espeak_rendering(request, voice, 16_000, speed=speed)
    audio = np.concatenate([np.zeros(3200, np.float32), audio, np.zeros(4800, np.float32)])
    return under_road_noise(audio, snr_db, seed=seed + n) if n % 2 else audio.astype(np.float32)


def hear(profile: str, recognizer: Recognizer, avoid: set[str]) -> list[tuple[str, str, str]]:
    """(intent, heard, said) for each of the profile's own examples heard as a near miss of it."""
    own = read_examples(profile, shared=False)
    rows = []
    t0 = time.monotonic()
    for n, (intent, request) in enumerate(own):
        heard = recognizer.transcribe(said(n, request)).strip()
        if near_miss(heard, request) and normalise(heard) not in avoid:
            rows.append((intent, heard.replace("\t", " "), request))
        if (n + 1) % 200 == 0 or n + 1 == len(own):
            print(
                f"  {profile}: {n + 1} of {len(own)} heard ({time.monotonic() - t0:.0f} s), {len(rows)} near misses",
                flush=True,
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["default", "car"], choices=["default", "car"])
    args = ap.parse_args()
    recognizer = moonshine_recognizer(False)
    avoid = corpora_requests()
    for profile in args.profiles:
        rows = hear(profile, recognizer, avoid)
        voices = ", ".join(v for v, _ in VOICES)
        text = HEADER.format(profile=profile, voices=voices, snr=SNR_DB, near=NEAR)
        text += "".join(f"{intent}\t{heard}\t{said}\n" for intent, heard, said in rows)
        path = Path(agent.profiles.__file__).parent / "exemplars" / f"heard-{profile}.tsv"
        path.write_text(text, "utf-8")
        print(f"wrote {path} ({len(rows)} examples)", flush=True)


if __name__ == "__main__":
    main()
