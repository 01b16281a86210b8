"""Benchmark: voice-to-voice latency of the cascade engine, measured at the client.

Starts `omni-agent serve` (the default, cascade engine) in its own process and
speaks a fixed set of questions (espeak-ng, or `--voice hibari`: a natural TTS
voice) over an aiortc client. For each turn: from the last voiced sample sent
to the first reply sample received. The server's per-turn figures split it:
end-of-turn wait, recognition, reply, synthesis, first speech frame; transport
and playout are what remains. smart-turn's verdicts come from /metrics;
`--no-smart-turn` waits the full silence at every pause.
`--llm-first-token-ms N` answers from a local chat-model server (the tests'
scripted one) that sends its first token after N ms, instead of the keyword
policy. Prints median and p95 and writes JSON, with the processor named.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from agent.bench import make_clips, spawn_server
from agent.client import RATE, AgentClient
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from tests.support import ChatServer, read_wav, speech_wav, wait_until

ANSWER = ["All right, ", "here is a short answer. ", "It has a second sentence."]  # starts loud, like most replies

QUESTIONS = [
    "What time is it?",
    "What can you do?",
    "Repeat after me: the sky is blue.",
    "Can you see me?",
    "What did I say?",
    "Hello there.",
    "How many people do you see?",
    "Tell me a joke about penguins.",
]


def serve_chat(first_token_s: float, urls: multiprocessing.Queue) -> None:
    """The scripted chat server, in a process of its own (in the client's it would share the GIL with aiortc)."""
    chat = ChatServer(lambda request: ANSWER, first_token_s=first_token_s)
    urls.put(chat.url)
    chat.thread.join()


def start_server(extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    """The server and its WebSocket URL."""
    proc, http = spawn_server(*extra)
    return proc, http.replace("http", "ws", 1) + "/ws"


def question_clips(voice: str) -> list[tuple[str, np.ndarray]]:
    """Each question spoken at the client's rate, with 0.2 s of silence before and 0.1 s after."""
    tmp = Path(tempfile.mkdtemp())
    if voice == "espeak":
        return [
            (q, read_wav(speech_wav(q, tmp / f"q{i}.wav", rate=RATE, pad_before=0.2, pad_after=0.1))[0])
            for i, q in enumerate(QUESTIONS)
        ]
    return [(c.text, c.audio) for c in make_clips(False, QUESTIONS)]


def verdicts(http: str) -> dict[str, float]:
    """smart-turn's verdicts so far, from the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"{http}/metrics", timeout=5).read().decode()
    return {
        s.labels["event"].removeprefix("end_of_turn_"): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "omni_engine_events_total" and s.labels["event"].startswith("end_of_turn_")
    }


async def run(url: str, rounds: int, voice: str = "espeak") -> list[dict]:
    clips = [(q, audio, int(np.flatnonzero(np.abs(audio) > 0.01)[-1])) for q, audio in question_clips(voice)]
    client = AgentClient(url)
    await client.connect()
    await asyncio.sleep(1.0)
    rows = []
    for r in range(rounds):
        for q, audio, last_voiced in clips:
            start = len(client.messages)

            ident = client.mic.play(audio)
            metrics = await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
            # a long pause inside a question (espeak's colon) may end a turn there: then each part is answered
            # and the reply to the first plays over the end of the question, which times nothing. Wait for all.
            await asyncio.sleep(max(0.3, client.mic.sent_at[ident] + audio.size / RATE + 0.8 - time.monotonic()))
            await wait_until(lambda s=start: settled(client.messages[s:]), 30)
            users = [m["text"] for m in parts(client.messages[start:], "transcript")]
            user = " / ".join(users)
            t_voice_end = client.mic.sent_at[ident] + last_voiced / RATE
            t_reply = client.received.first_loud_after(t_voice_end, threshold=0.02)
            v2v = (t_reply - t_voice_end) * 1000 if t_reply and len(users) == 1 else None
            known = metrics["endpoint_ms"] is not None and metrics["first_audio_ms"] is not None
            server = (metrics["endpoint_ms"] or 0) + (metrics["first_audio_ms"] or 0)
            row = {
                "question": q,
                "heard": user,
                "voice_to_voice_ms": v2v,
                "endpoint_ms": metrics["endpoint_ms"],
                "recognition_ms": metrics.get("recognition_ms"),
                "prepare_ms": metrics.get("prepare_ms"),
                "reply_ms": metrics.get("reply_ms"),
                "synthesis_ms": metrics.get("synthesis_ms"),
                "first_audio_ms": metrics["first_audio_ms"],
                "llm_first_token_ms": metrics.get("llm_first_token_ms"),
                "llm_first_sentence_ms": metrics.get("llm_first_sentence_ms"),
                "speculative": bool(metrics.get("speculative")),
                "turns": len(users),
                "transport_ms": v2v - server if v2v is not None and known else None,
            }
            rows.append(row)
            if known and v2v is not None:
                when = "made during the pause" if row["speculative"] else "after"
                print(
                    f"  [{r + 1}] {q!r:40} v2v {v2v:5.0f} ms = end-of-turn {row['endpoint_ms']:.0f} + first audio "
                    f"{row['first_audio_ms']:.0f} + transport {row['transport_ms']:.0f} "
                    f"(recognition {row['recognition_ms'] or 0:.0f}, {when})",
                    flush=True,
                )
            elif len(users) > 1:
                print(f"  [{r + 1}] {q!r:40} split into {len(users)} turns: {user!r}", flush=True)
            else:
                print(f"  [{r + 1}] {q!r:40} v2v {v2v or float('nan'):5.0f} ms", flush=True)
            await client.wait_for(lambda m: m.get("state") == "listening", 30, start)
            await asyncio.sleep(0.5)
    await client.close()
    return rows


def parts(msgs: list[dict], kind: str) -> list[dict]:
    """Final user transcripts ("transcript") or turn figures ("metrics") among `msgs`."""
    if kind == "metrics":
        return [m for m in msgs if m["type"] == "metrics"]
    return [m for m in msgs if m["type"] == "transcript" and m["role"] == "user" and m["final"]]


def settled(msgs: list[dict]) -> bool:
    """Every user turn among `msgs` has had its reply's figures."""
    return len(parts(msgs, "metrics")) >= len(parts(msgs, "transcript"))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main() -> None:
    ap = argparse.ArgumentParser(description="cascade voice-to-voice latency")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--end-silence-ms", type=int, default=480)
    ap.add_argument("--voice", choices=["espeak", "hibari"], default="espeak", help="who speaks the questions")
    ap.add_argument("--no-smart-turn", action="store_true", help="wait the full silence at every pause")
    ap.add_argument("--llm-first-token-ms", type=float, default=None, help="replies from a local chat model")
    ap.add_argument("--json", type=Path, default=Path("results/voice_to_voice.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
    smart_turn = "false" if args.no_smart_turn else "true"
    cfg.write_text(
        f"engine:\n  name: cascade\n  end_silence_ms: {args.end_silence_ms}\n  options:\n    smart_turn: {smart_turn}\n"
    )
    extra = ["--config", str(cfg)]
    chat = None
    if args.llm_first_token_ms is not None:
        ctx = multiprocessing.get_context("spawn")
        urls = ctx.Queue()
        chat = ctx.Process(target=serve_chat, args=(args.llm_first_token_ms / 1000, urls), daemon=True)
        chat.start()
        extra += ["--llm-url", urls.get(timeout=60), "--llm-model", "scripted"]
    proc, http = spawn_server(*extra)
    try:
        rows = asyncio.run(run(http.replace("http", "ws", 1) + "/ws", args.rounds, args.voice))
        judged = verdicts(http)
    finally:
        proc.terminate()
        proc.wait(10)
        if chat is not None:
            chat.terminate()
    keys = [
        "voice_to_voice_ms",
        "endpoint_ms",
        "recognition_ms",
        "prepare_ms",
        "reply_ms",
        "synthesis_ms",
        "first_audio_ms",
        "llm_first_token_ms",
        "llm_first_sentence_ms",
        "transport_ms",
    ]
    summary = {}
    print("\n| stage | median ms | p95 ms |\n| --- | --- | --- |")
    for k in keys:
        vals = [r[k] for r in rows if r[k] is not None]
        if not vals:
            continue
        summary[k] = {"median": pct(vals, 50), "p95": pct(vals, 95)}
        print(f"| {k.removesuffix('_ms').replace('_', ' ')} | {summary[k]['median']:.0f} | {summary[k]['p95']:.0f} |")
    split = sum(1 for r in rows if r["turns"] > 1)
    print(f"questions split into turns (not timed): {split} of {len(rows)}; smart-turn verdicts: {judged or 'off'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "benchmark": "voice_to_voice",
                "engine": "cascade",
                "replies": "keywords" if chat is None else f"a chat model, first token {args.llm_first_token_ms:g} ms",
                "voice": args.voice,
                "end_silence_ms": args.end_silence_ms,
                "smart_turn": not args.no_smart_turn,
                "smart_turn_verdicts": judged,
                "machine": machine(),
                "summary": summary,
                "turns": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
