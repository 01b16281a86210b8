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
from benchmarks.harness import espeak_rendering, room_impulse, wer, write_result
from benchmarks.held_words import HOLD_AFTER, RESUME_AFTER, SPACING
from benchmarks.hold_onset import microphone, reply_audio
from media.clock import INPUT_SAMPLES_PER_TICK as TICK
from media.echo_cancel import EchoCanceller
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
    rendered = []
    for text, _, (voice, speed) in items:
        user = espeak_rendering(text, voice, 16_000, speed=speed).astype(np.float32)
        user = user[int(np.flatnonzero(np.abs(user) > 0.02)[0]) :]
        rendered.append(user * (0.4 / np.abs(user).max()))
    onsets = [int((1.5 + SPACING * (i + 1)) * 16_000) + 173 * i for i in range(len(items))]
    n = (onsets[-1] + 3 * 16_000) // TICK * TICK
    reply24, reply16 = reply_audio()
    far16 = np.resize(reply16, n).astype(np.float32)
    far24 = np.resize(reply24, n * 3 // 2 + 8 * 480).astype(np.float32)
    for onset, user in zip(onsets, rendered, strict=True):
        a, b = onset + int(HOLD_AFTER * 16_000), onset + user.size + int(RESUME_AFTER * 16_000)
        far16[a:b] = 0
        far24[a * 3 // 2 : b * 3 // 2] = 0
    mic = microphone(far16, room_impulse(Path(tempfile.mkdtemp()), ROOM[2], rate=16_000), ROOM[0], ROOM[1])
    for onset, user in zip(onsets, rendered, strict=True):
        mic[onset : onset + user.size] += user[: mic.size - onset]

    aec3 = EchoCanceller()
    cleaned = []
    for t in range(mic.size // TICK):
        for k in range(4):
            s = (t * 4 + k) * 480
            aec3.played((np.clip(far24[s : s + 480], -1, 1) * 32767).astype(np.int16))
        cleaned.append(aec3.clean(mic[t * TICK : (t + 1) * TICK]))
    outputs = {"aec3": np.concatenate(cleaned)}
    mic16 = (np.clip(mic, -1, 1) * 32767).astype(np.int16)
    far = (np.clip(np.pad(far16, (0, max(0, mic.size - far16.size))), -1, 1) * 32767).astype(np.int16)
    linear = np.zeros(mic.size, np.float32)
    for s in range(0, mic.size - FRAME + 1, FRAME):
        linear[s : s + FRAME] = canceller.process(mic16[s : s + FRAME], far[s : s + FRAME]) / 32767
    outputs["linear"] = linear

    reply_only = slice(3 * 16_000, onsets[0] - 1600)  # the reply alone, after 3 s of adapting
    power = {k: float(np.mean(v[reply_only] ** 2)) for k, v in {"mic": mic, **outputs}.items()}
    reduction = {k: 10 * np.log10(power["mic"] / max(power[k], 1e-12)) for k in outputs}

    from agent.engines.cascade.models import load_models

    recognizer = load_models().recognizer
    turns = TurnTaking(hears_words=True)
    rows = []
    for onset, user, (text, kind, voice) in zip(onsets, rendered, items, strict=True):
        row = {"said": text, "kind": kind, "voice": voice[0]}
        for name, signal in outputs.items():
            heard = recognizer.hear(signal[max(0, onset - 3200) : onset + user.size + 3200]).text
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
