"""Benchmark: the cascade's voice to voice on the corpus, through aiortc's own receiver and through Chromium.

Starts `omni-agent serve` (the default, cascade engine) in its own process and
speaks every utterance of `benchmarks/corpus.py` (78 of them, five voices,
some with a hesitation in mid-sentence), clean and under 10 dB road noise
that runs through the whole session as a car's does. Default-profile
sessions have a camera showing one face; commands go to `in_car` sessions.

Two clients measure it, neither tuned by us:
- `aiortc`: an aiortc client that reads the reply as any aiortc application
  does (`track.recv()`, after aiortc's own jitter buffer and decoder); from
  the last voiced sample sent to the first reply sample received;
- `chromium`: the page in a headless Chromium, its fake microphone playing
  the session's utterances from a WAV file with its own processing on (echo
  cancellation, noise suppression, gain control), its camera a file showing
  a face; the figure is the page's own voice-to-voice readout.

After each reply's first sound the client stops it (`interrupt`) and goes
on. An utterance the server split into two turns is not timed but counted.
For every turn the server's figures split the time: end of turn, the
recognition left after the pause, the reply and its first speech, and what
remains is transport and playout. Prints medians and p95 per client,
condition and kind and writes JSON with the processor named; `--server-dir`
runs another checkout's server (a before-and-after with the same clients).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from agent.bench import spawn_server
from agent.client import RATE, AgentClient, CameraTrack
from agent.impair import ImpairingRelay, Impairment
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from benchmarks import corpus
from benchmarks.car_commands_wer import spell_numbers
from benchmarks.harness import CHROMIUM, ChatServer, chromium_flags, wait_until, wer, write_result, write_wav

ANSWER = ["All right, ", "here is a short answer. ", "It has a second sentence."]  # starts loud, like most replies
NOISE_SEEDS = {"default": 11, "in_car": 12}  # every run hears the same noise
# The networks of issue 32: jitter ms / loss %, each with its own seed (every run meets the same line)
LINES = {
    "clean": Impairment(),
    "20/1": Impairment(jitter_ms=20, loss=0.01, seed=21),
    "40/3": Impairment(jitter_ms=40, loss=0.03, seed=43),
    "60/10": Impairment(jitter_ms=60, loss=0.10, seed=610),
}
SLOT_S = 4.0  # Chromium: the silence after each utterance, for its reply to start and be stopped
STAGES = (
    "voice_to_voice_ms",
    "endpoint_ms",
    "recognition_ms",
    "recognition_left_ms",
    "prepare_ms",
    "reply_ms",
    "synthesis_ms",
    "first_audio_ms",
    "llm_first_token_ms",
    "transport_ms",
)


def face_image() -> np.ndarray:
    """640x480 RGB: one face (scikit-image's astronaut portrait)."""
    import cv2
    import skimage.data

    return cv2.resize(skimage.data.astronaut(), (640, 480), interpolation=cv2.INTER_AREA)


def serve_chat(first_token_s: float, urls: multiprocessing.Queue) -> None:
    """The scripted chat server, in a process of its own (in the client's it would share the GIL with aiortc)."""
    chat = ChatServer(lambda request: ANSWER, first_token_s=first_token_s)
    urls.put(chat.url)
    chat.thread.join()


def counted(http: str, family: str, prefix: str) -> dict[str, float]:
    """The server's counters of one /metrics family so far, by event, those whose name starts with `prefix`."""
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"{http}/metrics", timeout=5).read().decode()
    return {
        s.labels["event"]: s.value
        for family_ in text_string_to_metric_families(body)
        for s in family_.samples
        if s.name == f"{family}_total" and s.labels["event"].startswith(prefix)
    }


def verdicts(http: str) -> dict[str, float]:
    """The engine's end-of-turn counters so far."""
    return counted(http, "omni_engine_events", "end_of_turn")


def inbound_audio(http: str, before: dict[str, float]) -> dict[str, float]:
    """What the server's inbound audio path counted since `before` (packets, late, lost, made up)."""
    now = counted(http, "omni_transport_events", "audio_")
    return {k: v - before.get(k, 0) for k, v in now.items()}


def groups(clips: list[corpus.Clip]) -> list[tuple[str, list[corpus.Clip]]]:
    return [(p, [c for c in clips if c.entry.profile == p]) for p in ("default", "in_car")]


def as_heard(users: list[dict], continued: set[int]) -> list[str]:
    """The user's turns as the engine finally heard them: a turn in `continued` (a barge-in just after the turn
    before, `interruptions_continued`) holds that turn's words too, and stands for it."""
    heard: list[str] = []
    for m in users:
        if m["turn"] in continued and heard:
            heard.pop()
        heard.append(m["text"])
    return heard


def continuing(msgs: list[dict]) -> set[int]:
    return {m["turn"] for m in msgs if m["type"] == "metrics" and m.get("interruptions_continued")}


def row_for(
    clip: corpus.Clip, client: str, condition: str, users: list[dict], metrics: dict | None, v2v, continued: set[int]
) -> dict:
    """`users`: the clip's user turns (final transcripts); a split one counts, whether or not the second part
    continued the first: a reply began before the user had finished."""
    heard = " / ".join(as_heard(users, continued))
    row = {
        "client": client,
        "condition": condition,
        "text": clip.entry.said,
        "kind": clip.entry.kind,
        "profile": clip.entry.profile,
        "voice": clip.voice.name,
        "hesitation_s": clip.pause_s,
        "speech_s": round(clip.last_voiced / RATE - 0.2, 2),
        "heard": heard,
        "wer": round(wer(spell_numbers(clip.entry.said), spell_numbers(heard)), 3),
        "turns": len(users),
        "continued": sum(m["turn"] in continued for m in users),
        "voice_to_voice_ms": v2v if len(users) == 1 else None,
    }
    for k in STAGES[1:]:
        row[k] = (metrics or {}).get(k)
    row["end_reason"] = (metrics or {}).get("end_reason")
    server = [row["endpoint_ms"], row["first_audio_ms"]]
    if row["voice_to_voice_ms"] is not None and None not in server:
        row["transport_ms"] = row["voice_to_voice_ms"] - sum(server)
    return row


def report(row: dict) -> None:
    v2v = row["voice_to_voice_ms"]
    split = f"split into {row['turns']} turns" if row["turns"] != 1 else ""
    shown = f"{v2v:5.0f} ms" if v2v is not None else "   --   "
    parts = [f"{k.removesuffix('_ms')} {row[k]:.0f}" for k in ("endpoint_ms", "recognition_left_ms", "first_audio_ms")
             if row.get(k) is not None]  # fmt: skip
    print(f"  {row['client']:8} {row['condition']:5} {shown}  {row['text'][:44]!r:46} {split or ', '.join(parts)}",
          flush=True)  # fmt: skip


# ---------------------------------------------------------------- aiortc's own receiver


async def aiortc_session(
    url: str, profile: str, clips: list[corpus.Clip], condition: str, noise: float, line: str = "clean"
) -> list:
    camera = CameraTrack(fps=10, image=face_image()) if profile == "default" else None
    client = AgentClient(url, profile=profile, video=camera, stock_receiver=True)
    if line != "clean":  # the client's media through the impairing relay (agent/impair.py)
        client.relay = ImpairingRelay(LINES[line])
        condition = f"{condition} {line}"
    if condition.startswith("noisy"):
        client.mic.background = corpus.road_noise(30.0, seed=NOISE_SEEDS[profile]) * noise
    await client.connect()
    rows = []
    try:
        if not await wait_until(lambda: len(client.received.frames) >= 10, 20):
            raise TimeoutError("no audio from the server")
        await asyncio.sleep(1.5)  # the camera's frames have reached the engine
        for clip in clips:
            rows.append(await aiortc_turn(client, clip, condition))
            report(rows[-1])
    finally:
        await client.close()
    return rows


async def aiortc_turn(client: AgentClient, clip: corpus.Clip, condition: str) -> dict:
    start = len(client.messages)
    ident = client.mic.play(clip.audio)
    metrics = None
    with contextlib.suppress(TimeoutError):
        metrics = await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
    # every turn the utterance became (a hesitation may have ended one) has had its reply's figures
    await asyncio.sleep(max(0.3, client.mic.sent_at[ident] + clip.seconds + 0.8 - time.monotonic()))
    await wait_until(lambda: settled(client.messages[start:]), 30)
    users = user_finals(client.messages[start:])
    voice_end = client.mic.sent_at[ident] + clip.last_voiced / RATE
    heard_at = client.received.first_loud_after(voice_end, threshold=0.02)
    v2v = (heard_at - voice_end) * 1000 if heard_at is not None else None
    await client.send({"type": "interrupt"})  # the rest of the reply is not measured
    await client.wait_for(lambda m: m.get("state") == "listening", 30, start)
    await asyncio.sleep(0.6)
    return row_for(clip, "aiortc", condition, users, metrics, v2v, continuing(client.messages[start:]))


def user_finals(msgs: list[dict]) -> list[dict]:
    return [m for m in msgs if m["type"] == "transcript" and m["role"] == "user" and m["final"]]


def settled(msgs: list[dict]) -> bool:
    """Every user turn among `msgs` has had its reply's figures."""
    return sum(m["type"] == "metrics" for m in msgs) >= len(user_finals(msgs))


# ---------------------------------------------------------------- Chromium's page


LEAD_S = 4.0  # silence at the WAV's start: the call is set up while it plays


def write_y4m(path: Path, rgb: np.ndarray, frames: int = 10, fps: int = 10) -> None:
    """A still picture as Chromium's fake camera file (YUV4MPEG2, 4:2:0)."""
    import cv2

    h, w = rgb.shape[:2]
    yuv = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420).tobytes()
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(frames):
            f.write(b"FRAME\n" + yuv)


def chromium_session(http: str, profile: str, clips: list[corpus.Clip], condition: str, noise: float) -> list:
    """One page for the clips, their WAV as its microphone; each turn is the clip's in whose slot of the WAV the
    page got its transcript (the page's clock counted from when its microphone opened, where the file starts)."""
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="v2v-chromium-"))
    pieces = [np.zeros(int(LEAD_S * RATE), np.float32)]
    starts = []
    for clip in clips:
        starts.append(sum(p.size for p in pieces) / RATE)
        pieces += [clip.audio, np.zeros(int(SLOT_S * RATE), np.float32)]
    mic = np.concatenate(pieces)
    if condition == "noisy":
        mic = mic + corpus.road_noise(mic.size / RATE, seed=NOISE_SEEDS[profile]) * noise
    write_wav(tmp / "mic.wav", mic, RATE)
    flags = chromium_flags(tmp / "mic.wav")
    camera = profile == "default"
    if camera:
        write_y4m(tmp / "camera.y4m", face_image())
        flags.append(f"--use-file-for-fake-video-capture={tmp / 'camera.y4m'}")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp / "profile"), executable_path=CHROMIUM, headless=True, args=flags
        )
        try:
            page = ctx.new_page()
            page.goto(f"{http}/?profile={profile}")
            if camera:
                page.click("#camera")
                page.wait_for_function("document.getElementById('camera').getAttribute('aria-pressed') === 'true'")
            page.click("#connect")
            started = time.monotonic()
            page.wait_for_function("window.omni.messages.some(m => m.type === 'answer')", timeout=30_000)
            end = started + mic.size / RATE - SLOT_S / 2
            stopped = 0
            while time.monotonic() < end:  # stop each reply once the page has heard it, as the aiortc client does
                page.wait_for_timeout(100)
                heard = page.evaluate("window.omni.v2v.length")
                if heard > stopped:
                    page.wait_for_timeout(200)
                    page.click("#interrupt")
                    stopped = heard
            got = page.evaluate("[window.omni.messages, window.omni.messageTimes, window.omni.micStartedAt]")
            messages = [{**m, "at_s": (t - got[2]) / 1000} for m, t in zip(got[0], got[1], strict=True)]
            v2v = dict(zip(page.evaluate("window.omni.v2vTurns"), page.evaluate("window.omni.v2v"), strict=True))
        finally:
            ctx.close()
    return chromium_rows(clips, starts, condition, messages, v2v)


def chromium_rows(
    clips: list[corpus.Clip], starts: list[float], condition: str, messages: list[dict], v2v: dict
) -> list[dict]:
    """Each user turn belongs to the clip whose slot (from its start in the WAV to the next one's) it was heard
    in (`at_s`: seconds from the file's start); a clip with two turns was split, with none was lost."""
    turns = user_finals(messages)
    figures = {m["turn"]: m for m in messages if m["type"] == "metrics"}
    continued = continuing(messages)
    rows = []
    for i, clip in enumerate(clips):
        end = starts[i + 1] if i + 1 < len(clips) else float("inf")
        mine = [t for t in turns if starts[i] <= t["at_s"] < end]
        metrics = figures.get(mine[0]["turn"]) if len(mine) == 1 else None
        rows.append(row_for(clip, "chromium", condition, mine, metrics,
                            v2v.get(mine[0]["turn"]) if mine else None, continued))  # fmt: skip
        report(rows[-1])
    return rows


# ---------------------------------------------------------------- the run


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def spread(vals: list[float]) -> dict:
    return {"median": round(pct(vals, 50)), "p95": round(pct(vals, 95)), "n": len(vals)}


def summarise(rows: list[dict]) -> dict:
    """Median and p95 of each stage, per client and condition, and of voice to voice per kind."""
    out: dict = {}
    for client in sorted({r["client"] for r in rows}):
        for condition in [*dict.fromkeys(r["condition"] for r in rows if r["client"] == client), "all"]:
            mine = [r for r in rows if r["client"] == client and condition in (r["condition"], "all")]
            if not mine:
                continue
            s: dict = {"turns": len(mine), "timed": sum(r["voice_to_voice_ms"] is not None for r in mine)}
            s["split"] = sum(r["turns"] > 1 for r in mine)
            s["lost"] = sum(r["turns"] == 0 for r in mine)
            s["wer"] = round(float(np.mean([r["wer"] for r in mine])), 3)
            for k in STAGES:
                vals = [r[k] for r in mine if r.get(k) is not None]
                if vals:
                    s[k] = spread(vals)
            for kind in ("question", "command", "statement", "camera"):
                vals = [r["voice_to_voice_ms"] for r in mine if r["kind"] == kind and r["voice_to_voice_ms"]]
                if vals:
                    s[f"v2v_{kind}"] = spread(vals)
            for name, lo, hi in (("short", 0, 2), ("medium", 2, 4), ("long", 4, 99)):  # speech seconds
                sized = [r for r in mine if lo <= r["speech_s"] < hi and r["voice_to_voice_ms"] is not None]
                for k in ("voice_to_voice_ms", "recognition_left_ms", "recognition_ms"):
                    vals = [r[k] for r in sized if r.get(k) is not None]
                    if vals:
                        s[f"{k.removesuffix('_ms')}_{name}"] = spread(vals)
            reasons: dict[str, int] = {}
            for r in mine:
                if r.get("end_reason"):
                    reasons[r["end_reason"]] = reasons.get(r["end_reason"], 0) + 1
            s["end_reasons"] = reasons
            out[f"{client}/{condition}"] = s
    return out


def print_summary(summary: dict) -> None:
    print("\n| client / condition | turns (timed, split) | v2v median | v2v p95 | end of turn | recognition left | "
          "first audio | transport | camera v2v | WER |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def m(s: dict, k: str, q: str = "median") -> str:
        return str(s[k][q]) if k in s else "-"

    for key, s in summary.items():
        print(f"| {key} | {s['turns']} ({s['timed']}, {s['split']}) | {m(s, 'voice_to_voice_ms')} | "
              f"{m(s, 'voice_to_voice_ms', 'p95')} | {m(s, 'endpoint_ms')} | {m(s, 'recognition_left_ms')} | "
              f"{m(s, 'first_audio_ms')} | {m(s, 'transport_ms')} | {m(s, 'v2v_camera')} | "
              f"{s['wer']:.3f} |")  # fmt: skip


def drain(proc: subprocess.Popen[str]) -> None:
    """Read the server's output so that its pipe never fills and blocks it."""

    def run() -> None:
        assert proc.stdout is not None
        for _ in proc.stdout:
            pass

    threading.Thread(target=run, daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description="cascade voice to voice on the corpus")
    ap.add_argument("--client", nargs="+", choices=["aiortc", "chromium"], default=["aiortc", "chromium"])
    ap.add_argument("--condition", nargs="+", choices=["clean", "noisy"], default=["clean", "noisy"])
    ap.add_argument("--line", nargs="+", choices=list(LINES), default=["clean"],
                    help="the network between the aiortc client and the server: jitter ms / loss %%")  # fmt: skip
    ap.add_argument("--limit", type=int, default=None, help="only the corpus's first N utterances")
    ap.add_argument("--every", type=int, default=1, help="only every Nth utterance (a quick look)")
    ap.add_argument("--server-dir", type=Path, default=None, help="run the server from this checkout")
    ap.add_argument("--label", default="", help="what the run measures, for the JSON")
    ap.add_argument("--no-smart-turn", action="store_true", help="wait the full silence at every pause")
    ap.add_argument("--llm-first-token-ms", type=float, default=None, help="replies from a local chat model")
    ap.add_argument("--json", type=Path, default=Path("results/voice_to_voice.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    print("making the corpus ...", flush=True)
    clips = corpus.clips(args.limit)[:: args.every]
    noise = corpus.noise_level(clips)
    cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
    web = Path(__file__).resolve().parent.parent / "web"  # this checkout's page, whichever server runs
    cfg.write_text(
        f"engine:\n  name: cascade\n  options:\n    smart_turn: {'false' if args.no_smart_turn else 'true'}\n"
        f"server:\n  web_dir: {web}\n"
    )
    extra = ["--config", str(cfg)]
    chat = None
    if args.llm_first_token_ms is not None:
        ctx = multiprocessing.get_context("spawn")
        urls = ctx.Queue()
        chat = ctx.Process(target=serve_chat, args=(args.llm_first_token_ms / 1000, urls), daemon=True)
        chat.start()
        extra += ["--llm-url", urls.get(timeout=60), "--llm-model", "scripted"]
    proc, http = spawn_server(*extra, cwd=args.server_dir)
    drain(proc)
    rows: list[dict] = []
    network: dict[str, dict[str, float]] = {}
    try:
        for line in args.line:
            before = counted(http, "omni_transport_events", "audio_")
            for client in args.client:
                for condition in args.condition:
                    for profile, mine in groups(clips):
                        print(f"{client}, {condition}, line {line}, {profile}: {len(mine)} utterances", flush=True)
                        if client == "aiortc":
                            url = http.replace("http", "ws", 1) + "/ws"
                            rows += asyncio.run(aiortc_session(url, profile, mine, condition, noise, line))
                        elif line == "clean":
                            rows += chromium_session(http, profile, mine, condition, noise)
                        else:
                            print("  (Chromium's page is not run through the relay: left out)", flush=True)
            network[line] = inbound_audio(http, before)
            print(f"line {line}: the server's inbound audio {network[line]}", flush=True)
        judged = verdicts(http)
    finally:
        proc.terminate()
        proc.wait(10)
        if chat is not None:
            chat.terminate()
    summary = summarise(rows)
    print_summary(summary)
    print(f"end-of-turn counters: {judged}")
    write_result(
        args.json,
        {
            "benchmark": "voice_to_voice",
            "label": args.label,
            "engine": "cascade",
            "server_dir": str(args.server_dir or "."),
            "replies": "keywords" if chat is None else f"a chat model, first token {args.llm_first_token_ms:g} ms",
            "smart_turn": not args.no_smart_turn,
            "corpus": corpus.summary(clips),
            "noise_snr_db": corpus.NOISE_SNR_DB,
            "end_of_turn_counters": judged,
            "inbound_audio_by_line": network,
            "machine": machine(),
            "summary": summary,
            "turns": rows,
        },
    )


if __name__ == "__main__":
    main()
