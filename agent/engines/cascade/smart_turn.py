"""Semantic end of turn: smart-turn v3.2 hears from the sound of speech whether the user has finished.

Silence alone cannot tell "What time is it?" from "Set the temperature to ...":
the cascade waits the full end-of-turn silence for both. At the first pause this
model judges the turn so far; when it is confident the turn is complete, the
turn ends after a short silence instead (`media/endpoint.py`, `quick_end_ms`).

The model is Daily's smart-turn v3.2 (BSD-2-Clause; the ONNX file and its
licence ship in `data/`, taken unmodified from the pipecat-ai 1.14.0 wheel
rather than depending on pipecat's 23 packages). It runs on onnxruntime, one
thread, ~90 ms a call whatever the turn's length: its input is always the last
8 s, left-padded with zeros, as Whisper log-mel features of the waveform
normalised to zero mean and unit variance. faster-whisper's extractor (already
here for the Whisper recogniser) makes those features; it matches pipecat's own
to 1e-6.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.config import switch_or_fields

MODEL = Path(__file__).parent / "data" / "smart-turn-v3.2-cpu.onnx"
MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
RATE = 16_000
WINDOW = 8 * RATE  # the model hears the last 8 s


@dataclass(frozen=True)
class SmartTurnConfig:
    """`engine.options.smart_turn`: false, or a mapping of these fields (true: the defaults)."""

    enabled: bool = True
    threshold: float = 0.5  # P(complete) at or above which the turn ends after `end_silence_ms`
    end_silence_ms: int = 200  # the short silence; a turn not judged complete waits the profile's full silence

    @classmethod
    def from_option(cls, value: Any) -> SmartTurnConfig:
        cfg = switch_or_fields(cls, value, "engine.options.smart_turn")
        if not 0.0 < cfg.threshold < 1.0:
            raise ValueError(f"engine.options.smart_turn.threshold must be between 0 and 1, got {cfg.threshold}")
        if cfg.end_silence_ms < 0:
            raise ValueError(f"engine.options.smart_turn.end_silence_ms must be >= 0, got {cfg.end_silence_ms}")
        return cfg


class SmartTurn:
    """One ONNX session, shared by every session of the process; `probability` is safe from worker threads."""

    def __init__(self, path: Path = MODEL, threads: int = 1) -> None:
        import onnxruntime as ort
        from faster_whisper.feature_extractor import FeatureExtractor

        if not path.is_file():
            raise FileNotFoundError(f"the smart-turn model is missing: {path}")
        if path == MODEL and hashlib.sha256(path.read_bytes()).hexdigest() != MODEL_SHA256:
            raise RuntimeError(f"{path} is not the smart-turn v3.2 model this code was written for (checksum)")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.mel = FeatureExtractor(feature_size=80, sampling_rate=RATE, chunk_length=8)  # pure per call

    def features(self, audio: np.ndarray) -> np.ndarray:
        """The model's input for 16 kHz mono audio: [80, 800] log-mel of the last 8 s, left-padded."""
        x = np.asarray(audio, np.float32)[-WINDOW:]
        x = np.pad(x, (WINDOW - x.size, 0))
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        return self.mel(x, padding=0).astype(np.float32)

    def probability(self, audio: np.ndarray) -> float:
        """P(the turn is complete) for 16 kHz mono float32 audio that ends where the user paused."""
        (p,) = self.session.run(None, {"input_features": self.features(audio)[None]})
        return float(p.reshape(-1)[0])  # the model's output is already a probability


_lock = threading.Lock()
_model: SmartTurn | None = None


def load_smart_turn() -> SmartTurn:
    """The process's one model, loaded on first use."""
    global _model
    with _lock:
        if _model is None:
            _model = SmartTurn()
        return _model
