"""Benchmark: the interruption classifier's own examples as heard over the agent's reply, and as judged.

The classifier (`agent/profiles/interruption_words.py`) learns from its examples as written, but words said over
the reply reach it as Moonshine heard them through the echo canceller: "yeah" as "The eight.", "nice, nice" as
"The ice.". Each example is said by one of five espeak-ng voices that no benchmark speaks with, over a reply's
echo in one of three synthetic rooms (sox's reverb), the reply held over it as a barge-in holds it; it goes
through the echo canceller as a session runs it and is heard as the cascade hears speech over a held reply (from
the linear filter's output where it gave one, `weighable`). Then each is judged as a session judges it once all
was heard (`TurnTaking.meaning`: the classifier's probability, the recogniser's sureness, the sayings weighed),
by a classifier trained on the other folds of the examples (folds by phrase: none is judged by a model that
learnt it), at several `InterruptionConfig.unsure_below`; and again with the other folds' examples as heard
added to its training. Printed: how sure the recogniser was of words heard as said and otherwise, and per
setting the share of backchannels that resume the reply and of barge-ins that cancel it.

    python -m benchmarks.heard_interruptions [--rooms 3] [--json results/heard_interruptions.json]

Harder than a session (the user's voice peaks at 0.4 under an echo of -6 to -12 dB, every phrase over it), and
no held-out measure: its examples and rooms chose `unsure_below`. About two minutes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from agent.engines.cascade.models import load_models
from agent.machine import machine
from agent.profiles.interruption_words import BACKCHANNEL, BARGE_IN
from agent.profiles.understanding import IntentModel, normalise
from agent.profiles.understanding import read_examples as read_intent_examples
from benchmarks import conversation, held_words, hold_onset
from benchmarks.harness import room_impulse, write_result
from benchmarks.held_words import in_room, utterance
from benchmarks.hold_onset import reply_audio
from media.turn_taking import NOTHING, InterruptionConfig, TurnTaking

# No benchmark speaks with these (conversation.py's sets, held_words.py's, hold_onset.py's, heard_examples.py's)
VOICES = [("en-gb+f3", 160), ("en-us+m7", 170), ("en-029+m3", 155), ("en-gb-x-gbclan+m1", 165), ("en-us-nyc+f2", 175)]
ROOMS = [(200, -6, 50), (150, -9, 40), (250, -12, 60)]  # delay ms, gain dB, sox's reverberance
BATCH = 20  # utterances over one stretch of reply (a room's audio is made and cancelled at once)
FOLDS = 5
UNSURE = (-99.0, -1.4, -1.2, -1.0, -0.8, -0.6)  # InterruptionConfig.unsure_below: -99, words always read


def benchmark_phrases() -> set[str]:
    """What the benchmarks say over replies: a heard example must not be one (they are measured on)."""
    said = [t for s in conversation.SAID.values() for t in s.backchannels + s.barge_ins]
    said += held_words.BACKCHANNELS + held_words.REQUESTS + hold_onset.SAID
    return {normalise(t) for t in said}


def hear(examples: list[tuple[str, str]], rooms: int) -> list[dict]:
    """Each example said over the reply in a room, as heard: {label, said, heard, sureness, gaps, voice, room}."""
    tmp = Path(tempfile.mkdtemp())
    reply24, reply16 = reply_audio()
    impulses = {room: room_impulse(tmp, room[2], rate=16_000) for room in ROOMS[:rooms]}
    recognizer = load_models().recognizer
    turns = TurnTaking(hears_words=True)
    rows: list[dict] = []
    t0 = time.monotonic()
    for b in range(0, len(examples), BATCH):
        room = ROOMS[(b // BATCH) % rooms]
        batch = examples[b : b + BATCH]
        voices = [VOICES[(b + i) % len(VOICES)] for i in range(len(batch))]
        said = [utterance(text, voice, speed) for (_, text), (voice, speed) in zip(batch, voices, strict=True)]
        where = in_room(reply16, reply24, impulses[room], room, said)
        for (label, text), (voice, _), audio in zip(batch, voices, where.segments(where.heard()), strict=True):
            heard = recognizer.hear(audio, weighable=True)
            gaps = recognizer.weigh(heard, turns.sayings, turns.judging.sayings_within)
            rows.append({
                "label": label, "said": text, "heard": heard.text.strip(), "sureness": heard.sureness,
                "gaps": gaps, "voice": voice, "room": room,
            })  # fmt: skip
        done = b + len(batch)
        if done % 100 < BATCH or done == len(examples):
            print(f"  {done} of {len(examples)} heard ({time.monotonic() - t0:.0f} s)", flush=True)
    return rows


def misheard(rows: list[dict], avoid: set[str]) -> list[dict]:
    """The rows heard otherwise than said, with words to judge, that are no benchmark's phrase."""
    turns = TurnTaking(hears_words=True)
    return [r for r in rows if turns.unsure(r["heard"]) and normalise(r["heard"]) not in avoid | {normalise(r["said"])}]


def folds(examples: list[tuple[str, str]]) -> dict[str, int]:
    """Each example's fold, by its words: no phrase is judged by a model that learnt it, written or heard."""
    return {s: i % FOLDS for i, s in enumerate(sorted({normalise(t) for _, t in examples}))}


def held_out_probabilities(
    examples: list[tuple[str, str]], rows: list[dict], heard: list[dict] | None = None
) -> list[float | None]:
    """Each row's probability of a barge-in by a classifier trained on the other folds' examples (and, given
    `heard`, on those of them as heard)."""
    fold = folds(examples)
    out: list[float | None] = [None] * len(rows)
    for k in range(FOLDS):
        train = [(label, t) for label, t in examples if fold[normalise(t)] != k]
        train += [(r["label"], r["heard"]) for r in heard or () if fold[normalise(r["said"])] != k]
        model = IntentModel(train)
        b = model.intents.index(BARGE_IN)
        for i, r in enumerate(rows):
            if fold[normalise(r["said"])] == k and normalise(r["heard"]):
                out[i] = float(model.probabilities(r["heard"])[b])
    return out


def judged(rows: list[dict], meant: list[float | None], config: InterruptionConfig) -> dict:
    """As a session judges the rows' words once all were heard (`TurnTaking.meaning`, weighed where unsure):
    the share of backchannels that resume the reply and of barge-ins that cancel it."""
    turns = TurnTaking(hears_words=True, interruptions=config)
    stops = {BACKCHANNEL: [], BARGE_IN: []}
    for r, p in zip(rows, meant, strict=True):
        p = p if turns.unsure(r["heard"]) else None
        gaps = r["gaps"] if turns.unsure(r["heard"], p) else None
        stops[r["label"]].append(turns.meaning(r["heard"], gaps, p, r["sureness"]) != NOTHING)
    resumed, cancelled = 1 - float(np.mean(stops[BACKCHANNEL])), float(np.mean(stops[BARGE_IN]))
    return {"backchannels_resumed": resumed, "barge_ins_cancelled": cancelled, "balanced": (resumed + cancelled) / 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rooms", type=int, default=len(ROOMS), choices=range(1, len(ROOMS) + 1))
    ap.add_argument("--json", type=Path, default=Path("results/heard_interruptions.json"))
    args = ap.parse_args()
    examples = read_intent_examples("interruptions", shared=False)
    rows = hear(examples, args.rooms)
    wrong = misheard(rows, benchmark_phrases())
    right = [r for r in rows if normalise(r["heard"]) == normalise(r["said"]) and r["sureness"] is not None]
    print(f"{len(wrong)} of {len(rows)} heard otherwise than said, with words to judge", flush=True)
    sure = {"as_said": [r["sureness"] for r in right], "otherwise": [r["sureness"] for r in wrong if r["sureness"]]}
    quartiles = {k: np.percentile(v, [10, 25, 50, 75, 90]).round(2).tolist() for k, v in sure.items()}
    print(f"sureness (10/25/50/75/90 %): heard as said {quartiles['as_said']}, otherwise {quartiles['otherwise']}")
    written = held_out_probabilities(examples, rows)
    with_heard = held_out_probabilities(examples, rows, wrong)
    print("as judged, the classifier trained on the other folds (backchannels resumed / barge-ins cancelled):")
    results = {}
    for name, meant in (("written", written), ("written+heard", with_heard)):
        for below in UNSURE:
            config = InterruptionConfig(unsure_below=below)
            results[f"{name} unsure_below {below}"] = r = judged(rows, meant, config)
            print(f"  examples {name:13}, unsure_below {below:5}: {r['backchannels_resumed']:.0%} / "
                  f"{r['barge_ins_cancelled']:.0%} (balanced {r['balanced']:.1%})", flush=True)  # fmt: skip
    summary = {"rows": len(rows), "misheard": len(wrong), "sureness_percentiles": quartiles, "judged": results}
    result = {"benchmark": "heard_interruptions", "machine": machine(), "summary": summary, "rows": rows}
    write_result(args.json, result)


if __name__ == "__main__":
    main()
