"""Benchmark: what words said over the agent's echo mean, as the recogniser heard them and as weighed.

Offline, on synthetic rooms (sox's reverb, the echo mixed at 16 kHz, no codec): a long reply plays; over it
come backchannels ("mm hmm", "yeah", ...) and requests or stops ("stop", "what time is it?", ...) in several
espeak voices; the reply is held 160 ms after each onset (as a barge-in holds it) until the speech has ended.
The microphone goes through the echo canceller as a session runs it, and each utterance (with 200 ms before
it) through Moonshine, as the cascade hears speech held over a reply. Printed per utterance: what was heard,
what it means as heard (`TurnTaking.meaning`) and as weighed against the backchannel and stop sayings
(`weigh`); in all, the backchannels that would cancel the reply and the requests that would not.

Its phrases, voices and rooms are not the conversation benchmark's (`benchmarks/conversation.py`), which
measures the same over WebRTC; `interruptions.sayings_within` was chosen on these phrases (in a run without
the hold), so they are no held-out measure of it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.engines.cascade.models import load_models
from agent.machine import machine
from benchmarks.harness import espeak_rendering, room_impulse, write_result
from benchmarks.hold_onset import microphone, reply_audio
from media.clock import INPUT_SAMPLES_PER_TICK as TICK
from media.echo_cancel import EchoCanceller
from media.turn_taking import NOTHING, TurnTaking

BACKCHANNELS = [
    "Mm hmm.", "Mhm.", "Uh huh.", "Hmm.", "Mm.", "Yeah.", "Okay.", "Right.", "Yes.", "Sure.", "Yep.",
    "Uh huh, yeah.", "Oh.", "Ah.", "Okay, okay.",
]  # fmt: skip
REQUESTS = [
    "Stop.", "Wait.", "What time is it?", "No.", "Hang on.", "Who are you?", "Open the window.", "Tell me a joke.",
    "Can you see me?", "Excuse me.", "How far is it?", "Turn it off.", "Play some music.", "What?", "Never mind.",
    "Go back.",
]  # fmt: skip
VOICES = [
    ("en-us", 160), ("en-gb", 150), ("en-us+f3", 175), ("en-us+m3", 185), ("en-gb-x-rp", 165), ("en-us+f2", 160),
    ("en-gb-scotland", 160), ("en-us+m5", 150),
]  # fmt: skip
ROOMS = [(200, -6, 50), (120, -10, 30), (300, -8, 70)]  # delay ms, gain dB, sox's reverberance
SPACING = 2.6  # seconds between onsets
HOLD_AFTER = 0.16  # the reply is held this long after an onset ...
RESUME_AFTER = 0.5  # ... until this long after the utterance ends
MEANINGS = ("nothing", "stop", "request")


def utterance(text: str, voice: str, speed: int) -> np.ndarray:
    """`text` said by espeak-ng at 16 kHz, from its onset, peaking at 0.4."""
    user = espeak_rendering(text, voice, 16_000, speed=speed).astype(np.float32)
    user = user[int(np.flatnonzero(np.abs(user) > 0.02)[0]) :]
    return user * (0.4 / np.abs(user).max())


@dataclass
class Room:
    """Utterances over a reply in a room, the reply held over each as a barge-in holds it."""

    mic: np.ndarray  # 16 kHz: the reply's echo and the utterances
    far16: np.ndarray  # what played, at 16 kHz and at 24 kHz (what a session's canceller gets)
    far24: np.ndarray
    onsets: list[int]  # each utterance's first sample in `mic`
    sizes: list[int]

    def segments(self, audio: np.ndarray) -> list[np.ndarray]:
        """Each utterance's part of `audio` (aligned with `mic`), with 200 ms either side."""
        return [audio[max(0, o - 3200) : o + n + 3200] for o, n in zip(self.onsets, self.sizes, strict=True)]

    def aec3(self) -> np.ndarray:
        """`mic` through the echo canceller as a session runs it, tick by tick."""
        return self._cancelled(linear=False)

    def heard(self) -> np.ndarray:
        """... and as speech over a held reply is heard: the linear filter's output where it gave one."""
        return self._cancelled(linear=True)

    def _cancelled(self, linear: bool) -> np.ndarray:
        aec = EchoCanceller()
        cleaned = []
        for t in range(self.mic.size // TICK):
            for k in range(4):
                s = (t * 4 + k) * 480
                aec.played((np.clip(self.far24[s : s + 480], -1, 1) * 32767).astype(np.int16))
            out = aec.clean(self.mic[t * TICK : (t + 1) * TICK])
            cleaned.append(aec.heard if linear and aec.heard is not None else out)
        return np.concatenate(cleaned)


def in_room(reply16: np.ndarray, reply24: np.ndarray, ir: np.ndarray, room: tuple, said: list[np.ndarray]) -> Room:
    """Each of `said` (16 kHz) over the reply in `room` (delay ms, gain dB, ...), the reply held over it."""
    onsets = [int((1.5 + SPACING * (i + 1)) * 16_000) + 173 * i for i in range(len(said))]  # any phase of a tick
    n = (onsets[-1] + 3 * 16_000) // TICK * TICK
    far16 = np.resize(reply16, n).astype(np.float32)
    far24 = np.resize(reply24, n * 3 // 2 + 8 * 480).astype(np.float32)
    for onset, user in zip(onsets, said, strict=True):
        a, b = onset + int(HOLD_AFTER * 16_000), onset + user.size + int(RESUME_AFTER * 16_000)
        far16[a:b] = 0
        far24[a * 3 // 2 : b * 3 // 2] = 0
    mic = microphone(far16, ir, room[0], room[1])
    for onset, user in zip(onsets, said, strict=True):
        mic[onset : onset + user.size] += user[: mic.size - onset]
    return Room(mic, far16, far24, onsets, [u.size for u in said])


def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp())
    reply24, reply16 = reply_audio()
    recognizer = load_models().recognizer
    turns = TurnTaking(hears_words=True)
    items = [(t, "backchannel") for t in BACKCHANNELS] + [(t, "request") for t in REQUESTS]
    rows = []
    hear_s, weigh_s = [], []
    for r, room in enumerate(ROOMS[: args.rooms]):
        said = []
        for i, (text, _) in enumerate(items):
            voice, speed = VOICES[(i + 3 * r) % len(VOICES)]
            said.append((text, utterance(text, voice, speed)))
        where = in_room(reply16, reply24, room_impulse(tmp, room[2], rate=16_000), room, [u for _, u in said])
        segments = where.segments(where.aec3())
        for i, ((text, kind), audio) in enumerate(zip(items, segments, strict=True)):
            t0 = time.perf_counter()
            heard = recognizer.hear(audio, weighable=True)
            t1 = time.perf_counter()
            gaps = (
                recognizer.weigh(heard, turns.sayings, turns.judging.sayings_within)
                if turns.unsure(heard.text)
                else None
            )
            if gaps is not None:
                weigh_s.append(time.perf_counter() - t1)
            hear_s.append(t1 - t0)
            as_heard, weighed = turns.meaning(heard.text), turns.meaning(heard.text, gaps)
            row = {"room": room, "said": text, "kind": kind, "voice": VOICES[(i + 3 * r) % len(VOICES)][0]}
            row |= {"heard": heard.text, "as_heard": MEANINGS[as_heard], "weighed": MEANINGS[weighed]}
            rows.append(row)
            changed = "  (weighed: changed)" if (as_heard == NOTHING) != (weighed == NOTHING) else ""
            print(f"  {room} {kind:11} {text!r:18} {row['voice']:15} heard {heard.text!r:32} "
                  f"{row['as_heard']:>8} -> {row['weighed']}{changed}", flush=True)  # fmt: skip

    def cancelling(kind: str, key: str) -> int:
        return sum(r["kind"] == kind and r[key] != "nothing" for r in rows)

    n_bc, n_req = sum(r["kind"] == "backchannel" for r in rows), sum(r["kind"] == "request" for r in rows)
    summary = {
        "backchannels": n_bc,
        "backchannels_cancelling_as_heard": cancelling("backchannel", "as_heard"),
        "backchannels_cancelling_weighed": cancelling("backchannel", "weighed"),
        "requests": n_req,
        "requests_cancelling_as_heard": cancelling("request", "as_heard"),
        "requests_cancelling_weighed": cancelling("request", "weighed"),
        "hear_ms_median": float(np.median(hear_s) * 1000),
        "weigh_ms_median": float(np.median(weigh_s) * 1000) if weigh_s else None,
        "weigh_ms_p90": float(np.percentile(weigh_s, 90) * 1000) if weigh_s else None,
        "weighed": len(weigh_s),
    }
    return {"benchmark": "held_words", "machine": machine(), "summary": summary, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rooms", type=int, default=len(ROOMS))
    ap.add_argument("--json", type=Path, default=Path("results/held_words.json"))
    args = ap.parse_args()
    result = run(args)
    s = result["summary"]
    print(
        f"\nbackchannels that would cancel the reply, of {s['backchannels']}: as heard "
        f"{s['backchannels_cancelling_as_heard']}, weighed {s['backchannels_cancelling_weighed']}\n"
        f"requests and stops that would cancel it, of {s['requests']}: as heard {s['requests_cancelling_as_heard']}, "
        f"weighed {s['requests_cancelling_weighed']}\n"
        f"hearing {s['hear_ms_median']:.0f} ms (median); weighing {s['weigh_ms_median']:.0f} ms (median), "
        f"{s['weigh_ms_p90']:.0f} ms (p90) for the {s['weighed']} unsure"
    )
    write_result(args.json, result)


if __name__ == "__main__":
    main()
