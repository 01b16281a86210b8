"""`serve --workers 2`: sessions are served by both processes and /metrics shows both."""

import asyncio
import signal
import subprocess
import sys

from agent.client import AgentClient
from agent.server.workers import free_port
from tests.support import media_flowing, scrape_metrics, scrape_until


async def steady(port, pred, times: int, timeout: float = 30.0) -> bool:
    """Whether `times` scrapes in a row satisfy `pred` within `timeout`."""
    loop = asyncio.get_running_loop()
    end, run = loop.time() + timeout, 0
    while loop.time() < end:
        run = run + 1 if pred(await asyncio.to_thread(scrape_metrics, port)) else 0
        if run >= times:
            return True
        await asyncio.sleep(0.05)
    return False


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

        # each worker writes its figures once a second, so a sum is whole only once both have written since the
        # last session came: wait until ten scrapes in a row (answered by either worker) agree
        def whole(m):
            return m.get(("omni_workers", ())) == 2 and m.get(("omni_sessions_live", ())) == len(clients)

        assert await steady(port, whole, 10), f"/metrics never summed {len(clients)} sessions over both workers"
        for c in clients:
            await c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "2 worker processes" in out
