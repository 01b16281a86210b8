"""Test inputs made on the spot with Debian's espeak-ng and sox."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} is not installed; scripts/setup.sh --test installs it")
    return path


def speech_wav(text: str, path: Path, rate: int = 48_000, pad_before: float = 0.5, pad_after: float = 2.0) -> Path:
    """Speak `text` with espeak-ng into a mono WAV at `rate`, with silence around it."""
    raw = path.with_suffix(".raw.wav")
    subprocess.run([need("espeak-ng"), "-s", "150", "-w", str(raw), text], check=True, capture_output=True)
    subprocess.run(
        [
            need("sox"),
            str(raw),
            "-r",
            str(rate),
            "-c",
            "1",
            "-b",
            "16",
            str(path),
            "pad",
            str(pad_before),
            str(pad_after),
        ],
        check=True,
        capture_output=True,
    )
    raw.unlink()
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    import wave

    with wave.open(str(path)) as w:
        data = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        return data.reshape(-1, w.getnchannels())[:, 0].copy(), w.getframerate()


def loopback_only() -> bool:
    """True inside a network namespace whose only interface is loopback."""
    # /proc/net/dev follows the network namespace (/sys/class/net does not)
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return [ln.split(":", 1)[0].strip() for ln in lines] == ["lo"]
