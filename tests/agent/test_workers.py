"""`serve --workers 2`: sessions are served by both processes and /metrics shows both."""

import asyncio
import signal
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from agent.client import AgentClient
from agent.workers import free_port


def scrape(port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
    }


async def test_two_workers_share_the_port_and_the_metrics():
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "serve",
            "--engine",
            "echo",
            "--workers",
            "2",
            "--port",
            str(port),
            "--host-address",
            "127.0.0.1",
            "--transcripts",
            "",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # both workers listening
        clients, workers = [], set()
        for _ in range(12):
            c = AgentClient(f"ws://127.0.0.1:{port}/ws")
            await c.connect()
            clients.append(c)
            workers.add(c.answer["worker"])
            if len(workers) == 2 and len(clients) >= 4:
                break
        assert len(workers) == 2, "every session landed on one worker"
        await asyncio.sleep(2.5)  # each worker writes its metrics every second
        for _ in range(10):
            m = await asyncio.to_thread(scrape, port)
            assert m[("omni_workers", ())] == 2
            assert m[("omni_sessions_live", ())] == len(clients)  # summed over both
            assert m[("omni_sessions_total", ())] == len(clients)
        for c in clients:
            await c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "2 worker processes" in out
