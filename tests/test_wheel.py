"""The wheel works without the source tree: built from this checkout, installed into a fresh venv, its
`omni-agent serve` starts on the default profile and serves the page and /healthz from its package data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_serves_its_page_and_profiles_from_a_venv_without_the_source_tree(tmp_path):
    """Fails where the page or a profile is not package data (the server stopped at "config file not found"
    and its page was a 404), or is found through the source tree rather than the installed package."""
    source = tmp_path / "source"  # what the wheel is built from: the tracked layout, the links as links
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("agent", "media", "web", "configs"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    subprocess.run([*build, str(source)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("omni_agent-*.whl")
    shutil.rmtree(source)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, str(wheel)], check=True, timeout=300)
    # its dependencies from this venv (appended to the path, after the wheel's own packages; no checkout on it)
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.check_output([venv / "bin" / "python", "-c", paths], text=True).strip())
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run = tmp_path / "elsewhere"  # no checkout in the working folder either
    run.mkdir()
    where = subprocess.check_output(
        [venv / "bin" / "python", "-c", "import agent; print(agent.__file__)"], cwd=run, text=True
    )
    assert where.startswith(str(purelib)), where

    server = subprocess.Popen(
        [venv / "bin" / "omni-agent", "serve", "--port", "0", "--host-address", "127.0.0.1", "--transcripts", ""],
        cwd=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        assert server.stdout is not None
        for line in server.stdout:  # bounded: the server prints its URL once it listens, or exits
            lines.append(line)
            if "open http://" in line or len(lines) > 200:
                break
        url = next((w for w in lines[-1].split() if w.startswith("http://")), None)
        assert url, "".join(lines)
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert page == (ROOT / "web" / "index.html").read_text()
        script = urllib.request.urlopen(url.rstrip("/") + "/app.js", timeout=10).read().decode()
        assert script == (ROOT / "web" / "app.js").read_text()
        assert urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=10).status == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
