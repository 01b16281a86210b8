"""Benchmark: what the extra hop costs. Voice to voice with the cascade engine
served directly (one hop: WebRTC -> cascade) and through a second server whose
`realtime` engine talks to the first one's `/v1/realtime` (two hops).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from agent.bench import spawn_server
from agent.transport.ice import set_host_addresses
from benchmarks.harness import write_result
from benchmarks.voice_to_voice import run, start_server


def start_near(far_ws_url: str) -> tuple[subprocess.Popen[str], str]:
    """A second server whose realtime engine talks to the first one's /v1/realtime."""
    far = far_ws_url.removesuffix("/ws")
    proc, http = spawn_server("--engine", "realtime", "--realtime-url", f"{far}/v1/realtime")
    return proc, http.replace("http", "ws", 1) + "/ws"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path, default=Path("results/two_hops.json"))
    args = ap.parse_args()
    set_host_addresses(["127.0.0.1"])
    far, far_url = start_server([])
    near, near_url = start_near(far_url)
    try:
        print("one hop (WebRTC -> cascade):")
        one = asyncio.run(run(far_url, args.rounds))
        print("two hops (WebRTC -> realtime engine -> /v1/realtime -> cascade):")
        two = asyncio.run(run(near_url, args.rounds))
    finally:
        for p in (near, far):
            p.terminate()
            p.wait(15)
    med = {
        k: float(np.median([r["voice_to_voice_ms"] for r in rows if r["voice_to_voice_ms"]]))
        for k, rows in (("one_hop", one), ("two_hops", two))
    }
    print(
        f"\nvoice to voice median: one hop {med['one_hop']:.0f} ms, two hops {med['two_hops']:.0f} ms, "
        f"the extra hop adds {med['two_hops'] - med['one_hop']:.0f} ms"
    )
    write_result(
        args.json,
        {
            "benchmark": "two_hops",
            "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "median_ms": med,
            "one_hop": one,
            "two_hops": two,
        },
    )


if __name__ == "__main__":
    main()
