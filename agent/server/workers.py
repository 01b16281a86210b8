"""`serve --workers N`: N server processes sharing one port, and their metrics as one.

Each worker binds the same port with SO_REUSEPORT, so the kernel spreads new
connections across them and a session stays with the process that took its
WebSocket. Every second each worker writes its metrics to a shared folder;
`/metrics` on any worker returns the sum over all live workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# How one series of several workers becomes one: a total by default (counters, histograms, and gauges that count
# things now, as prometheus-client's multiprocess "livesum"); the worst for these gauges; the mean for those that
# are a level or a ratio; the earliest for a `_created` stamp.
MAX_GAUGES = {"omni_overload_level", "omni_jitter_target_ms", "process_max_fds", "process_start_time_seconds"}
MEAN_GAUGES = {"omni_echo_reduction_db", "omni_echo_delay_ms"}


def _merge(family: str, sample: str, values: list[float]) -> float:
    if sample.endswith("_created"):
        return min(values)
    if family in MAX_GAUGES:
        return max(values)
    if family in MEAN_GAUGES:
        return sum(values) / len(values)
    return sum(values)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_metrics(folder: str, text: bytes) -> None:
    path = Path(folder) / f"worker-{os.getpid()}.prom"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(text)
    tmp.replace(path)  # atomic: a reader never sees half a file


def _escaped(label: str) -> str:
    return label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def merged_metrics(folder: str, own: bytes, fresh_s: float = 5.0) -> bytes:
    """Every live worker's metrics as one (this one's `own` included, always fresh)."""
    texts = [own.decode()]
    now = time.time()
    for f in Path(folder).glob("worker-*.prom"):
        if f.name == f"worker-{os.getpid()}.prom" or now - f.stat().st_mtime > fresh_s:
            continue
        texts.append(f.read_text())
    kinds: dict[str, tuple[str, str]] = {}  # family: (type, help)
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )  # family: (sample, labels): one value per worker; grouped so a family's samples stay together
    for text in texts:
        for family in text_string_to_metric_families(text):
            kinds[family.name] = ({"unknown": "untyped"}.get(family.type, family.type), family.documentation)
            for s in family.samples:
                values[family.name][(s.name, tuple(sorted(s.labels.items())))].append(s.value)
    lines: list[str] = []
    for family, samples in values.items():
        kind, help_text = kinds[family]
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
        for (name, labels), seen in samples.items():
            label_text = "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in labels) + "}" if labels else ""
            lines.append(f"{name}{label_text} {_merge(family, name, seen)!r}")
    lines.append(
        f"# HELP omni_workers Server processes reporting\n# TYPE omni_workers gauge\nomni_workers {len(texts)}"
    )
    return ("\n".join(lines) + "\n").encode()


def run_workers(argv: list[str], n: int, host: str, port: int) -> int:
    """Start `n` copies of `serve` on one port; stop them together."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="omni-agent-workers-")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "agent.cli", *argv, "--port", str(port), "--reuse-port", "--metrics-dir", folder],
            stdout=subprocess.DEVNULL if i else None,  # one of them prints the URL
        )
        for i in range(n)
    ]
    print(
        f"omni-agent: {n} worker processes on {host}:{port} (pids {', '.join(str(p.pid) for p in procs)})", flush=True
    )

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [p.wait() for p in procs]
    for f in Path(folder).glob("*"):
        f.unlink()
    os.rmdir(folder)
    return max(codes)
