"""SIGTERM with live sessions: they are told, get a grace period, the server exits cleanly,
and the transcript files hold every completed turn."""

import asyncio
import json
import re
import signal
import subprocess
import sys
import time

import numpy as np

from agent.client import RATE, AgentClient
from benchmarks.harness import media_flowing


def burst():
    t = np.arange(int(0.6 * RATE)) / RATE
    return (0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


async def test_sigterm_with_live_sessions(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("engine:\n  name: echo\n  mode: turn\nserver:\n  shutdown_grace_s: 2.0\n")
    transcripts = tmp_path / "transcripts"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "serve",
            "--config",
            str(config),
            "--port",
            "0",
            "--host-address",
            "127.0.0.1",
            "--transcripts",
            str(transcripts),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = None
    for _ in range(30):
        if m := re.search(r"open http://([\d.:]+)/", proc.stdout.readline()):
            url = f"ws://{m.group(1)}/ws"
            break
    assert url
    clients = [AgentClient(url), AgentClient(url)]
    for c in clients:
        await c.connect()
        await media_flowing(c)
    for turn in (1, 2):
        for c in clients:
            c.mic.play(burst())
        for c in clients:
            await c.wait_for(lambda m, turn=turn: m["type"] == "metrics" and m["turn"] == turn, 10)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    for c in clients:
        notice = await c.wait_for(lambda m: m["type"] == "error", 10)
        assert notice["code"] == "busy" and "shutting down" in notice["message"]
    await clients[0].close()  # one leaves when told; the other stays until the grace runs out
    while proc.poll() is None and time.monotonic() - t0 < 20:
        await asyncio.sleep(0.05)
    took = time.monotonic() - t0
    output = proc.stdout.read()
    assert proc.returncode == 0, output
    # it waited for the grace (2 s) and then exited, not hung: 5x the typical time as the bound
    assert 1.9 < took < 5 * 2.0, f"shutdown took {took:.1f} s"
    await clients[1].close(bye=False)
    files = sorted(transcripts.glob("*.jsonl"))
    assert len(files) == 2
    for f in files:
        records = [json.loads(line) for line in f.read_text().splitlines()]
        assert records[0]["type"] == "session" and records[0]["engine"] == "echo"
        turns = [r for r in records if r["type"] == "metrics"]
        assert [r["turn"] for r in turns] == [1, 2]
        users = [r for r in records if r["type"] == "transcript" and r["role"] == "user"]
        assert len(users) == 2 and all("s of speech" in r["text"] for r in users)
        assert all(isinstance(r["t"], float) for r in records)
        assert records[-1]["type"] == "end"
