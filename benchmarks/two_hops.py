"""Benchmark: what the extra hop costs. Voice to voice with the cascade engine served directly (one hop:
WebRTC -> cascade) and through a second server whose `realtime` engine talks to the first one's
`/v1/realtime` (two hops), the same utterances of the voice-to-voice corpus to each, aiortc's client.

    python -m benchmarks.two_hops [--limit 24] [--every 2]

Prints median and p95 per hop and the difference; writes the JSON (--json).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from agent.bench import spawn_server
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from benchmarks import corpus
from benchmarks.harness import stats, write_result
from benchmarks.voice_to_voice import aiortc_session, drain, groups


def ws_url(http: str) -> str:
    return http.replace("http", "ws", 1) + "/ws"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=24, help="the corpus's first N utterances")
    ap.add_argument("--every", type=int, default=1, help="only every Nth of them")
    ap.add_argument("--json", type=Path, default=Path("results/two_hops.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    print("making the corpus ...", flush=True)
    clips = corpus.clips(args.limit)[:: args.every]
    far, far_http = spawn_server("--engine", "cascade")
    drain(far)
    realtime_url = far_http.replace("http", "ws", 1) + "/v1/realtime"
    near, near_http = spawn_server("--engine", "realtime", "--realtime-url", realtime_url)
    drain(near)
    rows: dict[str, list[dict]] = {"one_hop": [], "two_hops": []}
    try:
        for hop, http in (("one_hop", far_http), ("two_hops", near_http)):
            for profile, mine in groups(clips):
                if not mine:
                    continue
                print(f"{hop}, {profile}: {len(mine)} utterances", flush=True)
                rows[hop] += asyncio.run(aiortc_session(ws_url(http), profile, mine, "clean", 0.0))
    finally:
        for p in (near, far):
            p.terminate()
            p.wait(15)
    figures = {
        hop: stats([r["voice_to_voice_ms"] for r in got if r["voice_to_voice_ms"] is not None])
        for hop, got in rows.items()
    }
    one, two = figures["one_hop"], figures["two_hops"]
    print(
        f"\nvoice to voice (aiortc client), median / p95: one hop {one['median_ms']:.0f} / {one['p95_ms']:.0f} ms "
        f"(n={one['n']}), two hops {two['median_ms']:.0f} / {two['p95_ms']:.0f} ms (n={two['n']}); "
        f"the extra hop adds {two['median_ms'] - one['median_ms']:.0f} ms at the median"
    )
    write_result(
        args.json,
        {
            "benchmark": "two_hops",
            "client": "aiortc",
            "machine": machine(),
            "corpus": corpus.summary(clips),
            "voice_to_voice": figures,
            "turns": rows,
        },
    )


if __name__ == "__main__":
    main()
