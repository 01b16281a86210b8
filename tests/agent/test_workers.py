"""`serve --workers 2`: sessions are served by both processes and /metrics shows both."""

import asyncio
import signal
import subprocess
import sys

from agent.client import AgentClient
from agent.workers import free_port
from tests.support import media_flowing, scrape_metrics, scrape_until


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
        m = await scrape_until(port, lambda m: m.get(("omni_workers", ())) == 2)
        assert m.get(("omni_workers", ())) == 2, "the two workers did not both come up"
        clients, workers = [], set()
        for _ in range(12):
            c = AgentClient(f"ws://127.0.0.1:{port}/ws")
            await c.connect()
            clients.append(c)
            workers.add(c.answer["worker"])
            if len(workers) == 2 and len(clients) >= 4:
                break
        assert len(workers) == 2, "every session landed on one worker"
        for c in clients:
            await media_flowing(c)
        m = await scrape_until(port, lambda m: m.get(("omni_sessions_live", ())) == len(clients))
        assert m.get(("omni_sessions_live", ())) == len(clients), f"the workers' sum never reached {len(clients)}"
        for _ in range(10):
            m = await asyncio.to_thread(scrape_metrics, port)
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
