"""The GPU device check (benchmarks/device/check.sh) rehearsed on the CPU, so that it cannot rot between the rare
runs on a lent GPU: its preflight and dry run, and the benchmark commands its tiny-model step runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def _run(cmd: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(tmp_path), **env}
    return subprocess.run(cmd, cwd=REPO, env=environ, capture_output=True, text=True, timeout=600)


def test_the_dry_run_passes_its_preflight_here(tmp_path):
    rehearsal = {"CHECK_NO_GPU": "1", "CHECK_DRY_RUN": "1", "CHECK_PYTHON": sys.executable}
    done = _run(["bash", "benchmarks/device/check.sh"], tmp_path, **rehearsal)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0
    for line in (
        "ok   import agent.engines.qwen3_omni.engine",
        "ok   import benchmarks.qwen3_omni",
        "ok   transformers classes + full config",
        "ok   cuda graphs: skipped (--no-gpu)",
        "dry run: stopping after the preflight",
    ):
        assert line in done.stdout
    env = json.loads((tmp_path / "device-env.json").read_text())
    assert env["failures"] == []
    assert (tmp_path / "device-check.log").read_text().count("preflight: all checks passed") == 1


def test_the_tiny_model_steps_of_the_check_run_on_the_cpu(tmp_path):
    compare = tmp_path / "compare.json"
    done = _run([sys.executable, "-m", "benchmarks.qwen3_omni", "--compare-graphs", "--out", str(compare)], tmp_path)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0 and "graphs vs eager: ok" in done.stdout
    result = json.loads(compare.read_text())["compare_graphs"]
    assert result["tokens_identical"] and result["codes_identical"] and result["frames"] > 0

    bench = tmp_path / "bench.json"
    args = ["--graphs", "--sessions", "1,2", "--seconds", "1", "--max-tokens", "6", "--max-frames", "6"]
    done = _run([sys.executable, "-m", "benchmarks.qwen3_omni", *args, "--out", str(bench)], tmp_path)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0
    doc = json.loads(bench.read_text())
    assert [r["sessions"] for r in doc["results"]] == [1, 2] and doc["cuda_graphs"] is False  # uncaptured here
    for r in doc["results"]:
        assert r["frames"] > 0 and r["graphs"]["capture_failed"] is None
        # each stage ran and was timed (None where it never ran); how long it took is the benchmark's figure
        assert all(r["step_ms"][stage] is not None for stage in ("thinker_step", "talker_step", "code2wav"))


def test_the_check_can_say_where_eager_and_graphed_samples_part(tmp_path):
    """The diagnosis check.sh runs when graphs and eager disagree: per frame, and the conv stack's sensitivity."""
    cmd = [sys.executable, "-m", "benchmarks.device.code2wav_precision", "--sessions", "2", "--fp32", "ieee"]
    done = _run(cmd, tmp_path)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0
    assert "settings ieee ieee ieee" in done.stdout
    agreement = next(line for line in done.stdout.splitlines() if line.startswith("eager vs graphed"))
    assert "'tokens_identical': True" in agreement and "'codes_identical': True" in agreement
    assert done.stdout.count("  eager-graphed [") == 2 and done.stdout.count("  eager-alone   [") == 2
    assert done.stdout.count("conv stack, hidden x(1+") == 3
