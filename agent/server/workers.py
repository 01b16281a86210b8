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

# gauges whose meaning across workers is the worst one, not the total
MAX_GAUGES = {"omni_overload_level", "process_max_fds", "process_start_time_seconds"}


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_metrics(folder: str, text: bytes) -> None:
    path = Path(folder) / f"worker-{os.getpid()}.prom"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(text)
    tmp.replace(path)  # atomic: a reader never sees half a file


def merged_metrics(folder: str, own: bytes, fresh_s: float = 5.0) -> bytes:
    """Sum of every live worker's metrics (this one's `own` included, always fresh)."""
    texts = [own.decode()]
    now = time.time()
    for f in Path(folder).glob("worker-*.prom"):
        if f.name == f"worker-{os.getpid()}.prom" or now - f.stat().st_mtime > fresh_s:
            continue
        texts.append(f.read_text())
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    order: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []
    for text in texts:
        for family in text_string_to_metric_families(text):
            types[family.name], helps[family.name] = family.type, family.documentation
            for s in family.samples:
                key = (family.name, s.name, tuple(sorted(s.labels.items())))
                if key not in values:
                    order.append(key)
                    values[key] = s.value
                elif s.name in MAX_GAUGES or family.name in MAX_GAUGES:
                    values[key] = max(values[key], s.value)
                else:
                    values[key] += s.value
    lines: list[str] = []
    done: set[str] = set()
    for family, name, labels in order:
        if family not in done:
            done.add(family)
            kind = {"unknown": "untyped"}.get(types[family], types[family])
            lines += [f"# HELP {family} {helps[family]}", f"# TYPE {family} {kind}"]
        label_text = ",".join(f'{k}="{v}"' for k, v in labels)
        lines.append(
            f"{name}{{{label_text}}} {values[(family, name, labels)]!r}"
            if labels
            else f"{name} {values[(family, name, labels)]!r}"
        )
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
