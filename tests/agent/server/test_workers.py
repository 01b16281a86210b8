"""`serve --workers 2`: sessions are served by both processes and /metrics shows both."""

import asyncio
import signal
import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from agent.client import AgentClient
from agent.server.workers import free_port, merged_metrics
from benchmarks.harness import media_flowing, scrape_metrics
from tests.support import scrape_until


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
        clients, workers, busy = [], set(), 0
        for _ in range(24):
            c = AgentClient(f"ws://127.0.0.1:{port}/ws")
            try:
                await c.connect()
            except RuntimeError as exc:
                # the kernel spreads connections by a hash, not in turn: a worker it gave its 8 sessions to says
                # busy, and the next connection may land on the other
                await c.close()
                assert "busy" in str(exc), exc
                busy += 1
                continue
            clients.append(c)
            workers.add(c.answer["worker"])
            if len(workers) == 2 and len(clients) >= 4:
                break
        print(f"{len(clients)} sessions, {busy} refused as busy before both workers had one")
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


WORKER = """
import sys
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest
n = int(sys.argv[1])
Counter("omni_errors", "Errors", ["code"]).labels('bad "json"').inc(n)
Gauge("omni_sessions_live", "Sessions now", multiprocess_mode="livesum").set(2 * n)
Gauge("omni_overload_level", "Overload", multiprocess_mode="max").set(n)
h = Histogram("omni_turn_latency_seconds", "Latency", ["stage"], buckets=(0.5, 1.0))
for v in (0.2 * n, 0.7, 3.0 / n):
    h.labels("voice_to_voice").observe(v)
sys.stdout.write(generate_latest(REGISTRY).decode())
"""


def samples(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("omni_") and not s.name.endswith("_created") and s.name != "omni_workers"
    }


def test_the_merge_agrees_with_prometheus_clients_own_multiprocess_mode(tmp_path):
    """Two processes' figures merged from their texts (as the workers do) equal what prometheus-client reads
    from their shared files, for counters, a summed and a worst-of gauge, and a histogram."""
    shared, texts = tmp_path / "mmap", tmp_path / "texts"
    shared.mkdir()
    texts.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(shared), "PATH": "/usr/bin:/bin"}
    for n in (1, 3):
        out = subprocess.run([sys.executable, "-c", WORKER, str(n)], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        (texts / f"worker-{n}.prom").write_text(out.stdout)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(shared))
    reference = samples(generate_latest(registry).decode())
    merged = samples(merged_metrics(str(texts), b"").decode())
    assert reference[("omni_overload_level", ())] == 3 and reference[("omni_sessions_live", ())] == 8
    assert merged == reference


def test_a_created_stamp_is_the_earliest_and_a_ratio_the_mean(tmp_path):
    for n, (created, db) in enumerate(((100.0, 10.0), (50.0, 20.0))):
        (tmp_path / f"worker-{n}.prom").write_text(
            "# TYPE omni_sessions counter\n"
            f"omni_sessions_total 2.0\nomni_sessions_created {created}\n"
            f"# TYPE omni_echo_reduction_db gauge\nomni_echo_reduction_db {db}\n"
        )
    merged = {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(merged_metrics(str(tmp_path), b"").decode())
        for s in f.samples
    }
    assert merged[("omni_sessions_total", ())] == 4
    assert merged[("omni_sessions_created", ())] == 50
    assert merged[("omni_echo_reduction_db", ())] == 15
    assert merged[("omni_workers", ())] == 3  # the two files and this (empty) one
