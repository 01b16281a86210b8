"""Benchmark: how soon a voice over the agent's reply holds it, at the tick's end or as its audio arrives.

Offline, through the canceller and Silero as the session runs them, on synthetic rooms (sox's reverb; the echo
mixed at 16 kHz, no codec): the reply plays, the reference goes to the canceller 20 ms at a time and the
microphone comes in 20 ms packets. Per tick, a reply is held at the end of the first tick Silero calls voiced in
what the canceller left (and not the echo alone); as it arrives (`media/early_hold.py`), at the packet in which
the session's own Silero hears it. Phrases, voices, rooms and the onset's phase in the tick vary; printed: ms
from the onset to the hold, median / p90 (a phrase not heard within 1.5 s counts as 1.5 s), and how often the
echo alone held the reply (ticks, and packets let go at their tick's end).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from agent.machine import machine
from benchmarks.harness import espeak_rendering, room_impulse, write_result
from media.aligner import AlignedChunk
from media.clock import INPUT_SAMPLES_PER_TICK as TICK
from media.early_hold import WATCH_SCORE, Listening
from media.echo_cancel import EchoCanceller
from media.pcm import StreamResampler
from media.turn_taking import Floor
from media.vad import SileroDetector

PART = 320  # 20 ms at 16 kHz
REPLY = [
    "Tomorrow will be cloudy with a chance of rain in the evening, so take an umbrella with you.",
    "The nearest charging station is four kilometres ahead on the right hand side of the road.",
    "Your next meeting starts at half past two and lasts for about forty five minutes.",
]
SAID = [
    "Hang on a second.",
    "Could you repeat that?",
    "Stop.",
    "Wait, what was that?",
    "No, the other one.",
    "What time is it?",
    "Turn on the radio.",
    "Excuse me.",
    "How far is it?",
    "Open the window.",
]
VOICES = ["en-us+f2", "en-gb+m1", "en-us+m5", "en-gb-scotland", "en-us+f4"]
ROOMS = [(200, -6, 50), (80, -15, 30), (300, -8, 70), (150, -3, 50)]  # delay ms, gain dB, sox's reverberance
LIMIT_MS = 1500


def reply_audio() -> tuple[np.ndarray, np.ndarray]:
    """The reply the rooms play: at 24 kHz as the session sends it, and at 16 kHz as the microphone hears it."""
    gap = np.zeros(12_000, np.float32)
    reply24 = np.concatenate([p for text in REPLY for p in (espeak_rendering(text, "en-gb", 24_000), gap)])
    rs = StreamResampler(24_000, 16_000, quality="HQ")
    return reply24, np.concatenate([rs.process(reply24), rs.process(np.zeros(0, np.float32), last=True)])


def microphone(far16: np.ndarray, ir: np.ndarray, delay_ms: int, gain_db: float) -> np.ndarray:
    wet = np.convolve(far16, ir / np.sqrt(np.dot(ir, ir)) * 10 ** (gain_db / 20))[: far16.size]
    d = delay_ms * 16
    n = (far16.size + d) // TICK * TICK
    mic = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 3e-4
    mic[d:] += wet[: n - d]
    return mic


def holds(reply24: np.ndarray, mic: np.ndarray, onset: int) -> dict[str, float | int]:
    """Listen to `mic` while the reply plays: when each way first held it from `onset`, and false holds before."""
    aec = EchoCanceller()
    floor = Floor()
    listening = Listening(aec, floor)
    listening.detector = SileroDetector(on=WATCH_SCORE)
    vad = SileroDetector()
    played = np.zeros(mic.size * 3 // 2 + 8 * 480, np.float32)
    played[: min(reply24.size, played.size)] = reply24[: played.size]
    first: dict[str, float | None] = {"tick": None, "arrival": None}
    false_ticks = released = 0
    for k in range(mic.size // PART):
        s = k * 480
        aec.played((np.clip(played[s : s + 480], -1, 1) * 32767).astype(np.int16))
        end = (k + 1) % 4
        t = k // 4
        at_ms = ((k + 1) * PART - onset) / 16
        if end:  # the tick in progress, as the aligner has it after this packet
            listening.arrived(t, mic[t * TICK : (k + 1) * PART], sounding=True)
            if floor.held and floor.early_tick == t and first["arrival"] is None and at_ms >= 0:
                first["arrival"] = at_ms
            continue
        chunk = listening.tick(AlignedChunk(t, mic[t * TICK : (t + 1) * TICK]), talking=False)
        voiced = vad(chunk.audio) and not chunk.echo
        if at_ms < 0:
            false_ticks += voiced
            released += floor.held and not voiced
        elif voiced:
            first["tick"] = at_ms if first["tick"] is None else first["tick"]
            first["arrival"] = at_ms if first["arrival"] is None else first["arrival"]
        if floor.held:  # the tick's own judgement: let an early hold go (a voiced one would be held anyway)
            floor.held, floor.early_tick = False, None
        if first["tick"] is not None and first["arrival"] is not None:
            break
    return {
        "tick_ms": LIMIT_MS if first["tick"] is None else first["tick"],
        "arrival_ms": LIMIT_MS if first["arrival"] is None else first["arrival"],
        "echo_ticks_voiced": false_ticks,
        "early_released": released,
        "early": floor.early,
    }


def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp())
    reply24, far16 = reply_audio()
    rows = []
    for r, room in enumerate(ROOMS[: args.rooms]):
        ir = room_impulse(tmp, room[2], rate=16_000)
        mic0 = microphone(far16, ir, room[0], room[1])
        for i, text in enumerate(SAID):
            voice = VOICES[(i + r) % len(VOICES)]
            user = espeak_rendering(text, voice, 16_000).astype(np.float32)
            user *= 0.4 / np.abs(user).max()
            onset = int((2.2 + 0.9 * i) * 16_000) + 211 * (i + 3 * r)  # past AEC3's first second, at any phase
            lead = int(np.flatnonzero(np.abs(user) > 0.02)[0])
            mic = mic0.copy()
            mic[onset - lead : onset - lead + user.size] += user[: mic.size - onset + lead]
            found = holds(reply24, mic[: (onset + 24_000) // TICK * TICK], onset)
            rows.append({"room": room, "said": text, "voice": voice, **found})
            print(f"  {room} {text!r} ({voice}): tick {found['tick_ms']:.0f}, arrival {found['arrival_ms']:.0f} ms")
    tick = [r["tick_ms"] for r in rows]
    arrival = [r["arrival_ms"] for r in rows]
    summary = {
        "phrases": len(rows),
        "tick_ms_median": float(np.median(tick)),
        "tick_ms_p90": float(np.percentile(tick, 90)),
        "arrival_ms_median": float(np.median(arrival)),
        "arrival_ms_p90": float(np.percentile(arrival, 90)),
        "sooner_by_ms_median": float(np.median(np.subtract(tick, arrival))),
        "unheard": sum(t >= LIMIT_MS for t in tick),
        "echo_ticks_voiced_before_onset": sum(r["echo_ticks_voiced"] for r in rows),
        "early_holds_let_go_before_onset": sum(r["early_released"] for r in rows),
    }
    return {"benchmark": "hold_onset", "machine": machine(), "summary": summary, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rooms", type=int, default=len(ROOMS))
    ap.add_argument("--json", type=Path, default=Path("results/hold_onset.json"))
    args = ap.parse_args()
    result = run(args)
    s = result["summary"]
    print(
        f"\nheld after the onset, median / p90 over {s['phrases']} phrases: at the tick's end {s['tick_ms_median']:.0f}"
        f" / {s['tick_ms_p90']:.0f} ms; as it arrives {s['arrival_ms_median']:.0f} / {s['arrival_ms_p90']:.0f} ms "
        f"(sooner by a median {s['sooner_by_ms_median']:.0f} ms); unheard {s['unheard']}\n"
        f"the echo alone before the onset: {s['echo_ticks_voiced_before_onset']} ticks held, "
        f"{s['early_holds_let_go_before_onset']} early holds let go at their tick's end"
    )
    write_result(args.json, result)


if __name__ == "__main__":
    main()
