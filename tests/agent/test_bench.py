"""`omni-agent bench` against the echo engine: table, JSON and PNG, and honest percentiles."""

import json
import subprocess
import sys

import numpy as np


def test_bench_echo_short_run(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "bench",
            "--engine",
            "echo",
            "--sessions",
            "1",
            "2",
            "--turns",
            "4",
            "--video",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    assert "bench: 2 session(s) ..." in proc.stdout  # progress
    assert "| sessions | turns | p50 ms | p95 ms | p99 ms |" in proc.stdout
    result = json.loads(out.with_suffix(".json").read_text())
    assert [lvl["sessions"] for lvl in result["levels"]] == [1, 2]
    for lvl in result["levels"]:
        samples = np.array(lvl["samples_ms"])
        assert samples.size == lvl["turns"] == 4 * lvl["sessions"] - lvl["lost"]
        for q in (50, 95, 99):
            assert abs(lvl[f"p{q}_ms"] - np.percentile(samples, q)) < 0.05
        assert 30 < lvl["p50_ms"] < 400
        assert lvl["server_cpu_pct"] > 0 and lvl["server_rss_mb"] > 10
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
