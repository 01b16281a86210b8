"""Benchmark (an experiment for issue 28): what the recogniser hears of short speech over the echo's tail after a
hold, from AEC3 as the session runs it and from a linear echo canceller alone (speex's MDF, `media/linear_echo.py`:
no residual-echo suppressor).

Offline, as `benchmarks/held_words.py` builds it (sox's reverb, the reply held 160 ms after each onset until
500 ms after the speech, no codec), in one room (200 ms, -6 dB, reverberance 50), on the conversation
benchmark's held-out phrases and voices (`--said held-out` and `held-out-3`, coughs left out). Printed per
utterance: what Moonshine heard from each canceller; in all, the word error rate and how many the interruption
rule (`TurnTaking.meaning`) would judge rightly (a backchannel resumes, a request or stop cancels), and each
canceller's echo reduction over the reply.

It needs Debian's libspeexdsp1 (`scripts/setup.sh --test` installs it).

    python -m benchmarks.linear_echo [--taps 8192] [--json results/linear_echo.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from agent.machine import machine
from benchmarks.conversation import SAID
from benchmarks.harness import room_impulse, wer, write_result
from benchmarks.held_words import in_room, utterance
from benchmarks.hold_onset import reply_audio
from media.linear_echo import LinearEcho, SpeexUnavailable
from media.turn_taking import NOTHING, TurnTaking

ROOM = (200, -6, 50)  # delay ms, gain dB, reverberance
FRAME = 160  # 10 ms at 16 kHz


def linear_canceller(taps: int) -> LinearEcho:
    try:
        return LinearEcho(FRAME, taps)
    except SpeexUnavailable as exc:
        sys.exit(f"this benchmark needs speex's echo canceller: {exc}")


def run(args: argparse.Namespace) -> dict:
    canceller = linear_canceller(args.taps)
    items = []
    for name in ("held-out", "held-out-3"):
        said = SAID[name]
        for kind, phrases in (("backchannel", said.backchannels), ("request", said.barge_ins)):
            items += [(p, kind, said.voices[i % len(said.voices)]) for i, p in enumerate(phrases) if p != "cough"]
    rendered = [utterance(text, voice, speed) for text, _, (voice, speed) in items]
    reply24, reply16 = reply_audio()
    ir = room_impulse(Path(tempfile.mkdtemp()), ROOM[2], rate=16_000)
    room = in_room(reply16, reply24, ir, ROOM, rendered)
    mic = room.mic
    far = np.pad(room.far16, (0, max(0, mic.size - room.far16.size)))  # the microphone runs on by the path's delay
    linear = np.zeros(mic.size, np.float32)
    for s in range(0, mic.size - FRAME + 1, FRAME):
        linear[s : s + FRAME] = canceller.process(mic[s : s + FRAME], far[s : s + FRAME])
    outputs = {"aec3": room.aec3(), "linear": linear}

    reply_only = slice(3 * 16_000, room.onsets[0] - 1600)  # the reply alone, after 3 s of adapting
    power = {k: float(np.mean(v[reply_only] ** 2)) for k, v in {"mic": mic, **outputs}.items()}
    reduction = {k: 10 * np.log10(power["mic"] / max(power[k], 1e-12)) for k in outputs}

    from agent.engines.cascade.models import load_models

    recognizer = load_models().recognizer
    turns = TurnTaking(hears_words=True)
    rows = []
    segments = {name: room.segments(signal) for name, signal in outputs.items()}
    for i, (text, kind, voice) in enumerate(items):
        row = {"said": text, "kind": kind, "voice": voice[0]}
        for name in outputs:
            heard = recognizer.hear(segments[name][i]).text
            right = (turns.meaning(heard) == NOTHING) == (kind == "backchannel")
            row[name] = {"heard": heard, "wer": wer(text, heard), "judged_rightly": right}
        rows.append(row)
        print(f"  {kind:11} {text!r:31} AEC3 {row['aec3']['heard']!r:34} linear {row['linear']['heard']!r}", flush=True)
    summary = {
        name: {
            "echo_reduction_db": round(reduction[name], 1),
            "wer": float(np.mean([r[name]["wer"] for r in rows])),
            "wer_backchannels": float(np.mean([r[name]["wer"] for r in rows if r["kind"] == "backchannel"])),
            "wer_requests": float(np.mean([r[name]["wer"] for r in rows if r["kind"] == "request"])),
            "judged_rightly": sum(r[name]["judged_rightly"] for r in rows),
        }
        for name in outputs
    }
    return {
        "benchmark": "linear_echo",
        "machine": machine(),
        "room": ROOM,
        "taps": args.taps,
        "utterances": len(rows),
        "summary": summary,
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taps", type=int, default=8192, help="the linear filter's length (8192: 512 ms)")
    ap.add_argument("--json", type=Path, default=Path("results/linear_echo.json"))
    args = ap.parse_args()
    result = run(args)
    for name, s in result["summary"].items():
        print(
            f"{name}: echo reduction over the reply {s['echo_reduction_db']} dB; word error rate {s['wer']:.2f} "
            f"(backchannels {s['wer_backchannels']:.2f}, requests {s['wer_requests']:.2f}); judged rightly "
            f"{s['judged_rightly']} of {result['utterances']}"
        )
    write_result(args.json, result)


if __name__ == "__main__":
    main()
