"""Benchmark: click round trip through the echo engine, 1..N concurrent sessions.

Starts `omni-agent serve --engine echo` (stream mode) in its own process, then
runs N aiortc clients in this one, each sending audio and a 640x480 camera
and a click every 500 ms. A click's round trip runs from the moment its 20 ms
frame leaves the client's track to the moment its first loud sample arrives
back. Prints median/p95 per N and the server's CPU per session; writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from agent.client import RATE, AgentClient, CameraTrack
from agent.ice import set_host_addresses

CLICK = (0.8 * np.sin(np.arange(RATE // 100) * 2 * np.pi * 1000 / RATE)).astype(np.float32)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(max_sessions: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "serve",
            "--engine",
            "echo",
            "--mode",
            "stream",
            "--port",
            "0",
            "--host-address",
            "127.0.0.1",
            "--log-level",
            "warning",
            "--max-sessions",
            str(max_sessions),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for _ in range(20):
        if m := re.search(r"open http://([\d.:]+)/", proc.stdout.readline()):
            return proc, f"ws://{m.group(1)}/ws"
    proc.kill()
    raise RuntimeError("the server did not start")


async def one_client(url: str, clicks: int, offset: float, video: bool, rtts: list[float]) -> dict:
    client = AgentClient(url, video=CameraTrack(fps=10, size=(640, 480)) if video else None)
    await client.connect()
    await asyncio.sleep(1.5 + offset)
    lost = 0
    for _ in range(clicks):
        ident = client.mic.play(CLICK)
        await asyncio.sleep(0.5)
        t0 = client.mic.sent_at.get(ident)
        t1 = client.received.first_loud_after(t0) if t0 else None
        if t1 is None:
            lost += 1
        else:
            rtts.append(t1 - t0)
    times = np.diff(client.received.times)
    await client.close()
    return {"lost": lost, "gaps_over_100ms": int((times > 0.1).sum())}


async def run_level(url: str, pid: int, n: int, clicks: int, video: bool) -> dict:
    rtts: list[float] = []
    c0, t0 = cpu_seconds(pid), time.monotonic()
    results = await asyncio.gather(*(one_client(url, clicks, i * 0.5 / n, video, rtts) for i in range(n)))
    cpu = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
    ms = np.array(rtts) * 1000
    row = {
        "sessions": n,
        "video": video,
        "clicks": int(ms.size),
        "lost": sum(r["lost"] for r in results),
        "gaps_over_100ms": sum(r["gaps_over_100ms"] for r in results),
        "median_ms": float(np.median(ms)) if ms.size else None,
        "p95_ms": float(np.percentile(ms, 95)) if ms.size else None,
        "max_ms": float(ms.max()) if ms.size else None,
        "server_cpu_pct": 100 * cpu,
        "server_cpu_pct_per_session": 100 * cpu / n,
        "samples_ms": [round(x, 2) for x in ms.tolist()],
    }
    return row


async def main_async(args: argparse.Namespace) -> list[dict]:
    set_host_addresses(["127.0.0.1"])
    proc, url = start_server(max(args.sessions))
    rows = []
    try:
        for n in args.sessions:
            print(f"  {n} session(s), {args.clicks} clicks each ...", flush=True)
            row = await run_level(url, proc.pid, n, args.clicks, not args.no_video)
            rows.append(row)
            print(
                f"  {n:>3} sessions: median {row['median_ms']:.0f} ms, p95 {row['p95_ms']:.0f} ms, "
                f"lost {row['lost']}, server CPU {row['server_cpu_pct']:.0f} % "
                f"({row['server_cpu_pct_per_session']:.1f} % a session)",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(10)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description="echo click round trip at 1..N sessions")
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--clicks", type=int, default=20)
    ap.add_argument("--no-video", action="store_true")
    ap.add_argument("--json", type=Path, default=Path("results/echo_rtt.json"))
    args = ap.parse_args()
    print(f"echo click round trip ({'audio only' if args.no_video else 'audio + 640x480 10 fps video'})")
    rows = asyncio.run(main_async(args))
    print("\n| sessions | median ms | p95 ms | max ms | lost | server CPU % | per session % |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['sessions']} | {r['median_ms']:.0f} | {r['p95_ms']:.0f} | {r['max_ms']:.0f} | {r['lost']} "
            f"| {r['server_cpu_pct']:.0f} | {r['server_cpu_pct_per_session']:.1f} |"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"benchmark": "echo_rtt", "machine": f"{platform.machine()} {os.cpu_count()} cores", "rows": rows}, indent=2
        )
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
