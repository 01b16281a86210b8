"""Benchmark: a conversation in a room with a loudspeaker: echoed replies, backchannels and barge-ins.

Starts `omni-agent serve` (the cascade) in its own process. An aiortc client
(`agent.client.AgentClient`) hears the agent through a loudspeaker: its
microphone gets what came back, delayed, attenuated and through sox's reverb
of a room (`RoomEcho`), with no canceller of its own (as the page with
`?raw`, a phone on speaker); the server's canceller is all there is.

- Echoed replies: questions in several voices whose replies (1-9 s) come back
  through the room; a self-interruption is a reply cut, or a user turn made
  of its echo. A question that goes on after a pause the endpointer took for
  its end cuts the reply to its start as a user would (`continuation_ms`):
  counted apart. Each trial starts from rest and is judged on all it led to.
- Backchannels: "mm hmm", "yeah", "okay", a cough ... said over a long reply;
  resumed, never held, or (wrongly) cancelled.
- Barge-ins: a real question or "stop" over the reply: how long after its
  onset the reply went quiet at the client, and whether it was answered.

Prints the figures and the canceller's share of a core per talking session
(its CPU seconds from /metrics over the sessions' talking time), and writes
JSON with the processor named.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.bench import spawn_server
from agent.client import RATE, AgentClient, RoomEcho
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from benchmarks.harness import cough, espeak_rendering, room_impulse, scrape_metrics, wait_until, write_result

VOICES = [("en-us", 160), ("en-gb", 150), ("en-us+f3", 175), ("en-us+m3", 185), ("en-gb-x-rp", 165)]
ECHOED = [  # what is asked: replies from one second (the time) to nine (what it can do)
    "What can you do?",
    "What time is it?",
    "What is the date today?",
    "Who are you?",
    "Repeat after me: the weather is lovely today and I would like to walk by the river.",
    "Can you see me?",
    "Hello there.",
    "What do you do?",
    "Tell me the time, please.",
    "Say the quick brown fox jumps over the lazy dog.",
]
BACKCHANNELS = ["Mm hmm.", "Yeah.", "Okay.", "Right.", "Uh huh.", "Yes.", "Sure.", "cough", "Mhm.", "cough"]
BARGE_INS = [
    "What time is it?",
    "Stop.",
    "What is the date today?",
    "Wait.",
    "Can you see me?",
    "How many people do you see?",
    "Tell me the time, please.",
    "Stop, please.",
    "Who are you?",
    "Hello, can you hear me?",
]
# Phrases and voices no threshold, saying or rule was chosen on (this benchmark's above and
# benchmarks/held_words.py's were read while tuning the interruptions): `--said held-out`
HELD_OUT_VOICES = [
    ("en-029", 160), ("en-gb-x-gbclan", 155), ("en-us+f4", 170), ("en-gb-x-gbcwmd", 165), ("en-us-nyc", 175),
]  # fmt: skip
HELD_OUT_BACKCHANNELS = [
    "Uh-huh.", "Alright.", "Yeah, yeah.", "I see.", "Okay, sure.", "cough", "Got it.", "Oh, okay.", "Exactly.", "cough",
]  # fmt: skip
HELD_OUT_BARGE_INS = [
    "Hold on a second.", "Sorry, what was that?", "Can you repeat that?", "Turn the music down.", "Enough.",
    "Actually, never mind.", "Please stop talking.", "Where is the nearest station?", "No, that's wrong.", "Pause.",
]  # fmt: skip
# A third set, written after the second had been measured and read (its misses led to the rule on short
# utterances heard as three words, `InterruptionConfig.request_min_ms`), before that rule was measured: `--said
# held-out-3`
HELD_OUT_3_VOICES = [
    ("en-us+m2", 165), ("en-gb+f1", 160), ("en-us+m4", 170), ("en-gb-scotland+f2", 155), ("en-us+f1", 175),
]  # fmt: skip
HELD_OUT_3_BACKCHANNELS = [
    "Sure thing.", "Ah, I see.", "Right, right.", "Cool.", "cough", "Yup.", "Mm, okay.", "Fair enough.", "Nice.",
    "cough",
]  # fmt: skip
HELD_OUT_3_BARGE_INS = [
    "Can you speak slower?", "What's the weather like?", "Hang on a moment.", "That's not what I asked.",
    "Skip this part.", "Be quiet.", "Tell me something else.", "Louder, please.", "Cancel that.",
    "Give me the short version.",
]  # fmt: skip
# A fourth set, written by a helper that read nothing in the repository (told only which phrases and voices the
# other sets use), before speech over a held reply was heard from the linear filter and multi-word
# backchannels were taken whole: `--said held-out-4`
HELD_OUT_4_VOICES = [
    ("en-gb+m2", 165), ("en-029+f2", 155), ("en-us-nyc+m1", 180), ("en-gb-scotland+m3", 160),
    ("en-gb-x-gbclan+f4", 175),
]  # fmt: skip
HELD_OUT_4_BACKCHANNELS = [
    "Wow!", "Gotcha.", "Oh really?", "cough", "Makes sense.", "No way!", "True.", "Interesting, go on.",
    "Huh, I didn't know that.", "cough",
]  # fmt: skip
HELD_OUT_4_BARGE_INS = [
    "Hold up!", "Shush.", "No, I meant Tuesday.", "Let me stop you there.", "Can you start over?",
    "Switch to Spanish, please.", "Call my mom instead.", "That's the wrong city.", "How far is the airport?",
    "Set a timer for ten minutes.",
]  # fmt: skip
# A fifth, written the same way after the final rule was built (the verdict once all was heard, no weighing of
# three words or more) and before it was measured; four phrases the classifier's examples had ("Totally.",
# "Seriously?", "Good to know.", "Forget it.") replaced by a third helper's: `--said held-out-5`
HELD_OUT_5_VOICES = [
    ("en-gb-x-rp+f2", 160), ("en-029+m1", 170), ("en-us-nyc+f5", 175), ("en-gb-scotland+m5", 155),
    ("en-gb-x-gbcwmd+m2", 180),
]  # fmt: skip
HELD_OUT_5_BACKCHANNELS = [
    "Huh, I never would've guessed.", "Oh, that tracks, honestly.", "Well, isn't that something.", "cough",
    "That's pretty neat.", "Ha, that's hilarious!",
    "Haha, classic!", "Keep going, I'm listening.", "That sounds really good to me.", "cough",
]  # fmt: skip
HELD_OUT_5_BARGE_INS = [
    "Silence!", "No, I said Boston, not Austin.", "How do I get to the pharmacy?", "Play some jazz instead.",
    "Can you talk a bit faster?", "Go back to the first step.", "Just tell me the price.", "Okay, let me cut in.",
    "Remind me to buy milk tomorrow.", "Quick question, is it open today?",
]  # fmt: skip
# A sixth, written by a helper that read nothing in the repository (told the other sets' phrases), before the
# classifier learnt from its examples as heard over the reply (`exemplars/heard-interruptions.tsv`); five
# phrases its examples had ("Agreed.", "You're kidding.", "Mute.", ...) replaced by a second helper's: `--said
# held-out-6`
HELD_OUT_6_VOICES = [
    ("en-gb-x-rp+m4", 160), ("en-us+m6", 170), ("en-029+f3", 165), ("en-gb-scotland+f4", 175), ("en-us-nyc+m3", 155),
]  # fmt: skip
HELD_OUT_6_BACKCHANNELS = [
    "Good, good.", "That cracks me up.", "I'm with you so far.", "cough", "Ooh, sounds like my aunt.",
    "Man, I love hearing stuff like that.", "Heh, that's a good one.",
    "That's exactly what happened to my brother last year.", "Well, I'll be darned.", "cough",
]  # fmt: skip
HELD_OUT_6_BARGE_INS = [
    "Text Sarah that I'm running late.", "Actually, make it two tickets.", "Hmm, could you email that to me instead?",
    "I missed the address, what was it?", "Okay, that's all I needed, thanks.",
    "Which bakery did you mean, the downtown one?", "I'm allergic to peanuts, pick another recipe.",
    "Sorry, I actually asked about Thursday's ferry.", "Sorry, can you check my calendar for Friday instead?",
    "Can you find a vegetarian option instead?",
]  # fmt: skip
# A seventh, wider (40 backchannels as the issue names them, "words like mhm, yeah, okay, right", in 1-4 words,
# and four coughs; 19 barge-ins), written by a helper that read nothing in the repository (told the other sets'
# phrases; one barge-in another set had, "Switch to Spanish, please.", left out). Short backchannels are few:
# 22 of the 40 are also among the classifier's examples (exemplars/interruptions.tsv), and two of the barge-ins
# ("That's incorrect.", "Go back."); the voices are new: `--said held-out-7`
HELD_OUT_7_VOICES = [
    ("en-gb-x-rp+f4", 160), ("en-us+f5", 175), ("en-gb-scotland+m1", 165), ("en-029+m2", 155),
    ("en-gb-x-gbcwmd+f1", 170),
]  # fmt: skip
HELD_OUT_7_BACKCHANNELS = [
    "Hmm.", "Mm.", "Ooh.", "Whoa.", "Oh, right.", "Ah, okay.", "Yep.",
    "cough", "Okey-dokey.", "Mm, yeah.", "Wicked.", "Oh, for real?", "Aye.", "Aye, right enough.",
    "Sound.", "Grand.", "Fair dinkum.", "cough", "Too right.", "Spot on.", "Brilliant.",
    "Lovely.", "Absolutely.", "Definitely.", "For sure.", "Of course.", "Indeed.", "cough",
    "Oh my gosh.", "Get away!", "Is that right?", "Go on.", "Carry on.", "I hear you.", "Understood.",
    "That tracks.", "Oh, nice one.", "cough", "Good stuff.", "Oh, interesting.", "Fair point.", "Quite right.",
    "Yeah, man.", "No doubt.",
]  # fmt: skip
HELD_OUT_7_BARGE_INS = [
    "Stop right there.", "Change of plans.", "That's incorrect.", "Go back.", "Not that one.", "Nope, wrong city.",
    "Way too long.", "End the call.", "Wait, I said Boston, not Austin.", "What's the weather like tomorrow morning?",
    "Can you set a timer for ten minutes?", "You're not answering my question at all.",
    "Sorry, could you explain that last bit again?", "Actually, book it for Friday instead.",
    "How much is that going to cost?", "That's way too much detail, just summarize.",
    "Hold on, someone's at the door.", "No no, I wanted the vegetarian option.",
    "Send a text to Sarah saying I'm late.",
]  # fmt: skip
LONG = "What can you do?"  # about nine seconds of reply
PHASES = ("echoed", "backchannels", "barge-ins")


@dataclass(frozen=True)
class Said:
    """What the user says over the replies, and in which voices."""

    backchannels: list[str]
    barge_ins: list[str]
    voices: list[tuple[str, int]]


SAID = {"tuned": Said(BACKCHANNELS, BARGE_INS, VOICES)}
SAID["held-out"] = Said(HELD_OUT_BACKCHANNELS, HELD_OUT_BARGE_INS, HELD_OUT_VOICES)
SAID["held-out-3"] = Said(HELD_OUT_3_BACKCHANNELS, HELD_OUT_3_BARGE_INS, HELD_OUT_3_VOICES)
SAID["held-out-4"] = Said(HELD_OUT_4_BACKCHANNELS, HELD_OUT_4_BARGE_INS, HELD_OUT_4_VOICES)
SAID["held-out-5"] = Said(HELD_OUT_5_BACKCHANNELS, HELD_OUT_5_BARGE_INS, HELD_OUT_5_VOICES)
SAID["held-out-6"] = Said(HELD_OUT_6_BACKCHANNELS, HELD_OUT_6_BARGE_INS, HELD_OUT_6_VOICES)
SAID["held-out-7"] = Said(HELD_OUT_7_BACKCHANNELS, HELD_OUT_7_BARGE_INS, HELD_OUT_7_VOICES)


def speech(text: str, i: int, voices: list[tuple[str, int]] = VOICES) -> np.ndarray:
    """`text` in the i-th voice, 48 kHz, with 200 ms of silence before it."""
    voice, speed = voices[i % len(voices)]
    pcm = espeak_rendering(text, voice, RATE, speed=speed)
    return np.concatenate([np.zeros(RATE // 5, np.float32), pcm * np.float32(0.9 / max(1e-3, np.abs(pcm).max()))])


def onset_s(pcm: np.ndarray) -> float:
    return float(np.flatnonzero(np.abs(pcm) > 0.02)[0]) / RATE


def user_finals(client: AgentClient, start: int) -> list[str]:
    msgs = client.messages[start:]
    return [m["text"] for m in msgs if m["type"] == "transcript" and m["role"] == "user" and m["final"]]


async def session(url: str, room: RoomEcho) -> AgentClient:
    client = AgentClient(url.replace("http", "ws") + "/ws")
    client.mic.room = room
    await client.connect()
    await wait_until(lambda: len(client.received.frames) >= 5, 20)
    return client


async def settle(client: AgentClient, quiet_s: float = 1.5, timeout_s: float = 60) -> None:
    """Until the agent has been listening, with no message from the server, for `quiet_s`: each trial starts from
    rest and is judged on all it led to (a reply cut by its own echo, the turn its echo made, a question split in
    two), whatever the one before left going."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = len(client.messages)
        await asyncio.sleep(quiet_s)
        states = [m["state"] for m in client.messages if m["type"] == "state"]
        if len(client.messages) == seen and (not states or states[-1] == "listening"):
            return
    raise TimeoutError(f"the agent did not come to rest within {timeout_s} s")


def metrics_since(client: AgentClient, start: int) -> list[dict]:
    return [m for m in client.messages[start:] if m["type"] == "metrics"]


async def speaking_for(client: AgentClient, start: int, seconds: float) -> float:
    """Wait until the reply to the turn asked at message `start` has been heard for `seconds`; its start."""
    await client.wait_for(lambda m: m.get("state") == "speaking", 30, start)
    began = time.monotonic()
    await asyncio.sleep(seconds)
    return began


async def echoed(url: str, room: RoomEcho, n: int) -> tuple[list[dict], float | None]:
    """The rows, and the echo path the canceller estimated (read while the session is live)."""
    client = await session(url, room)
    rows = []
    for i in range(n):
        await settle(client)
        text = ECHOED[i % len(ECHOED)]
        start = len(client.messages)
        client.mic.play(speech(text, i))
        await client.wait_for(lambda m: m["type"] == "metrics", 60, start)
        await settle(client)  # the echo of its last words came back, and whatever it led to was said
        users, turns = user_finals(client, start), metrics_since(client, start)
        figures = _floor(turns)
        # The question going on after a pause the endpointer took for its end cuts the reply as a user would: a
        # continuation (its audio leads the new turn), not the agent interrupting itself
        continued = figures["interruptions_continued"]
        cut = sum(m["interrupted"] for m in turns) > continued or len(users) > 1 + continued
        rows.append({"asked": text, "heard": users, "self_interrupted": cut, **figures})
        verdict = "CUT" if cut else "ok " if not continued else "ok+"
        print(f"  echoed {i + 1:2}: {verdict} {text!r} heard {users} {figures}", flush=True)
    path = scrape_metrics(int(url.rsplit(":", 1)[1])).get(("omni_echo_delay_ms", ()))
    await client.close()
    return rows, path


async def backchannels(url: str, room: RoomEcho, said_by: Said) -> list[dict]:
    client = await session(url, room)
    rows = []
    for pair in range(0, len(said_by.backchannels), 2):
        await settle(client)
        start = len(client.messages)
        client.mic.play(speech(LONG, pair))
        await speaking_for(client, start, 1.5)
        for k in (pair, pair + 1):
            said = said_by.backchannels[k]
            client.mic.play(cough(k, RATE, 0.2) if said == "cough" else speech(said, k, said_by.voices))
            await asyncio.sleep(3.0)
        await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
        await settle(client)
        users, turns = user_finals(client, start), metrics_since(client, start)
        row = {
            "said": said_by.backchannels[pair : pair + 2],
            "reply_cut": any(m["interrupted"] for m in turns),
            "users": users,
        }
        rows.append({**row, **_floor(turns)})
        print(f"  backchannels {row['said']}: cut {row['reply_cut']} {_floor(turns)} heard {users}", flush=True)
    await client.close()
    return rows


async def barge_ins(url: str, room: RoomEcho, said_by: Said) -> list[dict]:
    client = await session(url, room)
    rows = []
    for i, text in enumerate(said_by.barge_ins):
        await settle(client)
        start = len(client.messages)
        client.mic.play(speech(LONG, i))
        await speaking_for(client, start, 2.0)
        pcm = speech(text, i + 1, said_by.voices)
        ident = client.mic.play(pcm)
        await wait_until(lambda: ident in client.mic.sent_at, 5)  # noqa: B023 (awaited here)
        spoke = client.mic.sent_at[ident] + onset_s(pcm)
        cut = await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
        cut_at = client.message_times[client.messages.index(cut)]
        after = cut["turn"]
        if cut["interrupted"]:  # the barge-in's own answer
            await client.wait_for(lambda m: m["type"] == "metrics" and m["turn"] > after, 30, start)  # noqa: B023
        await settle(client)
        quiet = client.received.quiet_from(spoke, cut_at) if cut["interrupted"] else None
        reaction = None if quiet is None else (quiet - spoke) * 1000
        users = user_finals(client, start)
        row = {"said": text, "cancelled": bool(cut["interrupted"]), "reaction_ms": reaction, "heard": users[1:]}
        rows.append(row)
        print(f"  barge-in {text!r}: cancelled {row['cancelled']} reaction {reaction} ms heard {users[1:]}", flush=True)
    await client.close()
    return rows


def _floor(turns: list[dict]) -> dict:
    """Speech over the replies of these turns: held, of those resumed, and cancelled by the user going on."""
    keys = ("interruptions", "interruptions_resumed", "interruptions_continued")
    return {k: sum(m.get(k) or 0 for m in turns) for k in keys}


HOLDS = {  # what /metrics counts of speech over the replies, by name here, and in what unit
    "holds": ("omni_interruptions_total", (("outcome", "held"),), 1),
    "blips": ("omni_interruptions_total", (("outcome", "blip"),), 1),
    "early": ("omni_interruptions_total", (("outcome", "early"),), 1),
    "early_released": ("omni_interruptions_total", (("outcome", "early_released"),), 1),
    "held_s": ("omni_output_held_frames_total", (), 0.02),  # 20 ms frames
}


def holds(port: int, before: dict[str, float] | None = None) -> dict[str, float]:
    """The server's counts of speech over replies (held, one-tick blips, seconds of reply held silent), less
    `before`'s: what a phase cost the replies it did not mean to stop."""
    got = scrape_metrics(port)
    now = {k: got.get((name, labels), 0.0) * unit for k, (name, labels, unit) in HOLDS.items()}
    return {k: round(v - (before or {}).get(k, 0.0), 2) for k, v in now.items()}


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


async def run(args: argparse.Namespace) -> dict:
    set_host_addresses(["127.0.0.1"])  # the client offers loopback alone, as the server does
    ir = room_impulse(Path(tempfile.mkdtemp()), args.reverb)
    room = lambda: RoomEcho(args.delay_ms, args.gain_db, ir)  # noqa: E731
    serve = ["--engine", "cascade", "--max-sessions", "4"] + (["--config", str(args.config)] if args.config else [])
    proc, url = spawn_server(*serve, cwd=args.server_checkout)
    port = int(url.rsplit(":", 1)[1])
    t0 = time.monotonic()
    echo_rows: list[dict] = []
    bc_rows: list[dict] = []
    bi_rows: list[dict] = []
    path = None
    held: dict[str, dict[str, float]] = {}
    try:
        if "echoed" in args.phases:
            print(f"echoed replies ({args.delay_ms} ms, {args.gain_db} dB, reverb {args.reverb}):", flush=True)
            at = holds(port)
            echo_rows, path = await echoed(url, room(), args.replies)
            held["echoed"] = holds(port, at)
        if "backchannels" in args.phases:
            print("backchannels over a reply:", flush=True)
            at = holds(port)
            bc_rows = await backchannels(url, room(), SAID[args.said])
            held["backchannels"] = holds(port, at)
        if "barge-ins" in args.phases:
            print("barge-ins over a reply:", flush=True)
            at = holds(port)
            bi_rows = await barge_ins(url, room(), SAID[args.said])
            held["barge-ins"] = holds(port, at)
        metrics = scrape_metrics(port)
    finally:
        proc.terminate()
        proc.wait(10)
    talking_s = time.monotonic() - t0
    cpu = metrics.get(("omni_echo_cpu_seconds_total", ()), 0.0)
    watch = metrics.get(("omni_early_hold_cpu_seconds_total", ()), 0.0)
    reactions = [r["reaction_ms"] for r in bi_rows if r["reaction_ms"] is not None]
    said = [s for r in bc_rows for s in r["said"]]
    summary = {
        "self_interruptions": sum(r["self_interrupted"] for r in echo_rows),
        "echoed_replies": len(echo_rows),
        "questions_continued": sum(r["interruptions_continued"] > 0 for r in echo_rows),
        "echo_path_ms_estimated": path,  # the room's delay, and the client's and server's buffers
        "backchannels": len(said),
        "backchannel_replies_cut": sum(r["reply_cut"] for r in bc_rows),
        "backchannels_held_and_resumed": sum(r["interruptions_resumed"] or 0 for r in bc_rows),
        # ... and those the reply went on after, held or not (a cough may not hold it): both of a pair whose reply
        # was not cut; of a cut pair at most one, if a hold was resumed before the cut (one backchannel may hold
        # the reply more than once: its holds are no count of backchannels)
        "backchannels_reply_went_on": sum(
            2 if not r["reply_cut"] else min(1, r["interruptions_resumed"]) for r in bc_rows
        ),
        "barge_ins": len(bi_rows),
        "barge_ins_cancelled": sum(r["cancelled"] for r in bi_rows),
        "barge_in_reaction_ms_median": pct(reactions, 50),
        "barge_in_reaction_ms_p95": pct(reactions, 95),
        # the echoed replies held: at a START (a continued question's included), for one tick (a blip), in seconds
        "echoed_replies_held": held.get("echoed"),
        "backchannel_phase_held": held.get("backchannels"),
        "barge_in_phase_held": held.get("barge-ins"),
        "aec_cpu_seconds": cpu,
        "aec_core_share_per_talking_session": cpu / talking_s,
        "early_hold_cpu_seconds": watch,  # the session's own Silero hearing replies' ticks in parts
        "early_hold_core_share_per_talking_session": watch / talking_s,
    }
    return {"summary": summary, "echoed": echo_rows, "backchannels": bc_rows, "barge_ins": bi_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replies", type=int, default=20)
    ap.add_argument("--delay-ms", type=float, default=200)
    ap.add_argument("--gain-db", type=float, default=-6)
    ap.add_argument("--reverb", type=int, default=50, help="sox reverb's reverberance, 0-100")
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="which parts to run")
    ap.add_argument("--server-checkout", type=Path, help="serve from this checkout (another version, to compare)")
    ap.add_argument("--config", type=Path, help="the server's YAML profile (media.echo_onset: false, to compare)")
    ap.add_argument(
        "--said",
        choices=SAID,
        default="tuned",
        help="the backchannels' and barge-ins' phrases and voices: held-out "
        "ones were never read while tuning the interruptions",
    )
    ap.add_argument("--json", type=Path, default=Path("results/conversation.json"))
    args = ap.parse_args()
    result = asyncio.run(run(args))
    s = result["summary"]
    print(
        f"\nself-interruptions: {s['self_interruptions']} in {s['echoed_replies']} echoed replies "
        f"(the echo's path estimated at {s['echo_path_ms_estimated']} ms); {s['questions_continued']} questions "
        f"went on after a pause and cut the reply to their start, as a user would; the echoed replies were held "
        f"(those included): {s['echoed_replies_held']}\n"
        f"backchannels: {s['backchannels']} said, replies cut {s['backchannel_replies_cut']}, "
        f"held and resumed {s['backchannels_held_and_resumed']}, the reply went on after "
        f"{s['backchannels_reply_went_on']}\n"
        f"barge-ins: {s['barge_ins_cancelled']} of {s['barge_ins']} cancelled; the reply quiet "
        f"{s['barge_in_reaction_ms_median']} ms (median), {s['barge_in_reaction_ms_p95']} ms (p95) after "
        f"the onset, at the aiortc client\n"
        f"echo canceller: {s['aec_cpu_seconds']:.2f} CPU s, {s['aec_core_share_per_talking_session']:.1%} of a core "
        f"per talking session; the early hold's detector {s['early_hold_cpu_seconds']:.2f} CPU s, "
        f"{s['early_hold_core_share_per_talking_session']:.1%}"
    )
    room = {"delay_ms": args.delay_ms, "gain_db": args.gain_db, "reverberance": args.reverb}
    write_result(
        args.json, {"benchmark": "conversation", "machine": machine(), "room": room, "said": args.said, **result}
    )


if __name__ == "__main__":
    main()
