"""Soak: sessions connect, talk and leave over and over; resources must come back.

Runs against `omni-agent serve --engine echo --mode turn` in its own process.
Reads the server's resident memory, open file descriptors and threads at a
warm baseline and after the last session left. `python -m benchmarks.soak
--minutes 5 --sessions 4` for a long run; the test suite runs a short one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from pathlib import Path

import numpy as np

from agent.bench import start_server
from agent.client import RATE, AgentClient
from agent.transport.ice import set_host_addresses
from benchmarks.harness import write_result


def resources(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return {"rss_mb": rss / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": threads}


def burst(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.4 * np.sin(2 * np.pi * 250 * t)).astype(np.float32)


async def one_life(url: str, rng: random.Random) -> int:
    """Connect, say a few things, leave (sometimes rudely); returns turns completed."""
    client = AgentClient(url)
    turns = 0
    try:
        await client.connect(timeout=15)
        for _ in range(rng.randrange(1, 4)):
            start = len(client.messages)
            client.mic.play(burst(rng.uniform(0.3, 0.9)))
            await client.wait_for(lambda m: m["type"] == "metrics", 10, start)
            turns += 1
    finally:
        await client.close(bye=rng.random() < 0.7)
    return turns


async def soak(url: str, pid: int, sessions: int, seconds: float, seed: int = 7) -> dict:
    rng = random.Random(seed)
    await one_life(url, rng)  # warm up: imports, first codec set-up
    await asyncio.sleep(1.0)
    baseline = resources(pid)
    end = time.monotonic() + seconds
    lives = turns = failures = 0

    async def worker() -> None:
        nonlocal lives, turns, failures
        while time.monotonic() < end:
            try:
                turns += await one_life(url, rng)
            except Exception:
                failures += 1
            lives += 1

    await asyncio.gather(*(worker() for _ in range(sessions)))
    await asyncio.sleep(2.0)  # sessions wind down
    final = resources(pid)
    return {
        "sessions": sessions,
        "seconds": seconds,
        "lives": lives,
        "turns": turns,
        "failures": failures,
        "baseline": baseline,
        "final": final,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="connect-talk-leave soak against the echo engine")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--json", type=Path, default=Path("results/soak.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    proc, http = start_server("echo", "turn", args.sessions + 1)
    try:
        result = asyncio.run(soak(http.replace("http", "ws", 1) + "/ws", proc.pid, args.sessions, args.minutes * 60))
    finally:
        proc.terminate()
        proc.wait(15)
    b, f = result["baseline"], result["final"]
    print(
        f"soak: {result['sessions']} concurrent, {args.minutes:g} min, {result['lives']} sessions, "
        f"{result['turns']} turns, {result['failures']} failed"
    )
    print(
        f"soak: memory {b['rss_mb']:.0f} -> {f['rss_mb']:.0f} MB, fds {b['fds']} -> {f['fds']}, "
        f"threads {b['threads']} -> {f['threads']}"
    )
    write_result(args.json, result)


if __name__ == "__main__":
    main()
