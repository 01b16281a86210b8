"""Benchmark: word error rate of the offline recognisers on car commands, clean and in road noise.

Ten in-car commands, each spoken by two voices (espeak-ng en-us+f3 at 185
words a minute, and the bundled hibari voice), recognised clean and with pink
noise (a car's road and engine noise) mixed in at 10 and 5 dB below the
speech (seeded, so every run hears the same noise). The noisy clips are heard
twice: as they are, and through the server's front end (`media/echo_cancel.py`:
WebRTC's noise suppressor and high-pass filter, after two seconds of the same
noise, as a running session would have heard). Both recognisers hear the same
clips: Moonshine base-en (the default) and Whisper tiny.en. Numbers are
compared as words ("19" counts as "nineteen"). Prints WER and ms per
utterance and writes JSON with the processor named.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from agent.machine import machine
from benchmarks.harness import espeak_rendering, to_16k, wer, with_noise, write_result
from media.echo_cancel import EchoCanceller

COMMANDS = [
    "Open the front window.",
    "Close the sunroof.",
    "Set the temperature to nineteen degrees.",
    "Turn on the seat heating for the driver.",
    "Lock all the doors.",
    "Play some jazz music.",
    "Navigate to the nearest charging station.",
    "Turn the volume down a little.",
    "Open the rear left window halfway.",
    "Turn off the air conditioning.",
]
RATE = 16_000
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen".split()
ONES += ["seventeen", "eighteen", "nineteen"]
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell_numbers(text: str) -> str:
    """Whole numbers under 100 as words, as the commands say them."""

    def word(n: int) -> str:
        if n < 20:
            return ONES[n]
        tens, ones = divmod(n, 10)
        return TENS[tens - 2] + (f" {ONES[ones]}" if ones else "")

    text = text.replace("%", " percent").replace("°", " degrees")
    return " ".join(word(int(w)) if w.isdigit() and int(w) < 100 else w for w in text.split())


def clips() -> list[dict]:
    from agent.engines.cascade.models import Synthesizer

    tts = Synthesizer()
    out = []
    for i, text in enumerate(COMMANDS):
        for voice, speech in (
            ("espeak", espeak_rendering(text, "en-us+f3", RATE, speed=185)),
            ("hibari", to_16k(np.concatenate(list(tts.stream(text))), tts.rate)),
        ):
            pad = np.zeros(RATE // 4, np.float32)
            out.append({"text": text, "voice": voice, "noise": "clean", "audio": np.concatenate([pad, speech, pad])})
            for snr in (10, 5):
                lead = np.zeros(2 * RATE, np.float32)  # the noise a session heard before the command
                noisy = with_noise(np.concatenate([lead, pad, speech, pad]), float(snr), i)
                out.append({"text": text, "voice": voice, "noise": f"{snr} dB pink", "audio": noisy[lead.size :]})
                suppressed = front_end(noisy)[lead.size :]
                out.append({"text": text, "voice": voice, "noise": f"{snr} dB pink, suppressed", "audio": suppressed})
    return out


NOISES = ("clean", "10 dB pink", "10 dB pink, suppressed", "5 dB pink", "5 dB pink, suppressed")


def front_end(audio: np.ndarray) -> np.ndarray:
    """`audio` as the server's session hears it: through its canceller, in 80 ms ticks, nothing played."""
    canceller = EchoCanceller()
    tick = RATE * 80 // 1000
    quiet = np.zeros(480, np.int16)  # a 20 ms frame of the agent's silence at 24 kHz
    out = []
    for start in range(0, audio.size - tick + 1, tick):
        for _ in range(4):
            canceller.played(quiet)
        out.append(canceller.clean(audio[start : start + tick]))
    return np.concatenate(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recognizers", default="moonshine,whisper")
    ap.add_argument("--json", type=Path, default=Path("results/car_commands_wer.json"))
    args = ap.parse_args()
    from agent.engines.cascade.models import load_models

    heard = clips()
    summary: dict[str, dict] = {}
    rows = []
    for name in args.recognizers.split(","):
        recognizer = load_models(recognizer=name).recognizer
        recognizer.transcribe(heard[0]["audio"])  # warm
        for clip in heard:
            t0 = time.perf_counter()
            text = recognizer.transcribe(clip["audio"])
            ms = (time.perf_counter() - t0) * 1000
            errors = wer(clip["text"], spell_numbers(text))
            rows.append({"recognizer": name, **{k: clip[k] for k in ("text", "voice", "noise")}, "heard": text})
            rows[-1].update(wer=errors, words=len(clip["text"].split()), ms=ms)
            print(f"  {name:9} {clip['voice']:6} {clip['noise']:10} {errors:4.2f} {ms:4.0f} ms  {text!r}", flush=True)
        for noise in NOISES:
            mine = [r for r in rows if r["recognizer"] == name and r["noise"] == noise]
            words = sum(r["words"] for r in mine)
            summary.setdefault(name, {})[noise] = {
                "wer": sum(r["wer"] * r["words"] for r in mine) / words,
                "ms_median": float(np.median([r["ms"] for r in mine])),
            }
    print(f"\n| recogniser | {' | '.join(f'WER {n}' for n in NOISES)} | ms per command (median) |")
    print("| --- " * (len(NOISES) + 2) + "|")
    for name, s in summary.items():
        cells = " | ".join(f"{s[n]['wer']:.1%}" for n in NOISES)
        print(f"| {name} | {cells} | {s['clean']['ms_median']:.0f} |")
    result = {"benchmark": "car_commands_wer", "machine": machine(), "summary": summary, "utterances": rows}
    write_result(args.json, result)


if __name__ == "__main__":
    main()
