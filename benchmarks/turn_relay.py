"""Benchmark: a session through a TURN relay against the direct path, in the same run.

Debian's coturn on 127.0.0.1 (credentials minted from its shared secret, as `ice.secret` mints them); two echo
servers (stream mode) in this process, one direct and one relay-only, and an aiortc client built as the page
is (its ICE servers and policy from `/ice`). Sessions alternate between the two. Printed per path: setup (from
the offer's sending to ICE connected), and the round trip of a 10 ms click through the echo (median / p95).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from agent.client import AgentClient
from agent.machine import machine
from agent.transport.ice import set_host_addresses
from benchmarks.harness import (
    CLICK,
    make_config,
    round_trip,
    running,
    stats,
    turn_server,
    wait_until,
    write_result,
    ws_url,
)

SECRET = "turn-relay-benchmark"
PORT = 3479


async def session(server, relayed: bool, clicks: int) -> dict:
    client = AgentClient(ws_url(server))
    if relayed:
        await asyncio.to_thread(client.fetch_ice)
    t0 = time.monotonic()
    await client.connect()
    await wait_until(lambda: client.pc is not None and client.pc.connectionState == "connected", 10)
    setup = time.monotonic() - t0
    await wait_until(lambda: len(client.received.frames) >= 25, 10)  # past the first half second
    trips = []
    for _ in range(clicks):
        trips.append(await round_trip(client, CLICK, 5.0))
        await asyncio.sleep(0.3)
    await client.close()
    return {"setup_s": setup, "round_trips_s": trips}


async def run(args: argparse.Namespace) -> dict:
    set_host_addresses(["127.0.0.1"])
    direct = make_config("echo", "stream")
    relay = make_config("echo", "stream")
    relay.ice.servers = [f"turn:127.0.0.1:{PORT}"]
    relay.ice.secret = SECRET
    relay.ice.relay_only = True
    rows = []
    with turn_server(Path(tempfile.mkdtemp()), ["127.0.0.1"], SECRET, PORT):
        async with running(direct) as d, running(relay) as r:
            for i in range(args.sessions):
                for name, server in (("direct", d), ("relay", r)):
                    got = await session(server, name == "relay", args.clicks)
                    rows.append({"path": name, **got})
                    trips = [None if t is None else round(t * 1000) for t in got["round_trips_s"]]
                    print(f"  {i + 1:2d} {name:6} setup {got['setup_s'] * 1000:5.0f} ms, round trips {trips} ms")
    summary = {}
    for name in ("direct", "relay"):
        mine = [r for r in rows if r["path"] == name]
        trips = [t * 1000 for r in mine for t in r["round_trips_s"] if t is not None]
        lost = sum(t is None for r in mine for t in r["round_trips_s"])
        summary[name] = {
            "setup": stats([r["setup_s"] * 1000 for r in mine]),
            "round_trip": stats(trips),
            "clicks_lost": lost,
        }
    medians = [summary[name]["round_trip"]["median_ms"] for name in ("relay", "direct")]
    summary["relay_minus_direct_median_ms"] = medians[0] - medians[1]
    return {"benchmark": "turn_relay", "machine": machine(), "summary": summary, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10, help="sessions per path, alternating")
    ap.add_argument("--clicks", type=int, default=10, help="clicks per session")
    ap.add_argument("--json", type=Path, default=Path("results/turn_relay.json"))
    args = ap.parse_args()
    result = asyncio.run(run(args))
    s = result["summary"]
    for name in ("direct", "relay"):
        p = s[name]
        print(f"{name:6}: setup {p['setup']['median_ms']:.0f} / {p['setup']['p95_ms']:.0f} ms, click round trip "
              f"{p['round_trip']['median_ms']:.1f} / {p['round_trip']['p95_ms']:.1f} ms (median / p95), "
              f"{p['clicks_lost']} clicks lost")  # fmt: skip
    print(f"through the relay: {s['relay_minus_direct_median_ms']:+.1f} ms on the median round trip")
    write_result(args.json, result)


if __name__ == "__main__":
    main()
