"""Live interpretation offline: Debian's apertium for the text, espeak-ng for the voice.

apertium is GPL and ships as programs, so it runs as a separate process: one
kept-alive pipeline per language pair in null-flush mode (each text ends in a
NUL byte and comes back ending in one), ~2 ms a sentence instead of ~0.3 s
for a fresh process. espeak-ng speaks the languages hibari cannot.
"""

from __future__ import annotations

import io
import os
import re
import select
import shutil
import subprocess
import threading
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent.profiles.dialog import DialogContext, Reply
from media.pcm import StreamResampler

MODES_DIR = Path(os.environ.get("APERTIUM_MODES", "/usr/share/apertium/modes"))
# ISO 639-1 codes the page uses, and apertium's names for them
APERTIUM_CODES = {"en": ("eng", "en"), "es": ("spa", "es"), "ca": ("cat", "ca"), "gl": ("glg", "gl")}
LANGUAGE_NAMES = {"en": "English", "es": "Spanish", "ca": "Catalan", "gl": "Galician"}


class TranslationUnavailable(RuntimeError):
    pass


def mode_file(source: str, target: str) -> Path | None:
    for s in APERTIUM_CODES.get(source, ()):
        for t in APERTIUM_CODES.get(target, ()):
            path = MODES_DIR / f"{s}-{t}.mode"
            if path.is_file():
                return path
    return None


def available_pairs() -> list[tuple[str, str]]:
    return [(s, t) for s in APERTIUM_CODES for t in APERTIUM_CODES if s != t and mode_file(s, t)]


class Translator:
    """One apertium pipeline kept alive; thread-safe (one text at a time)."""

    def __init__(self, source: str, target: str, timeout: float = 5.0) -> None:
        path = mode_file(source, target)
        if path is None:
            pairs = ", ".join(f"{s}->{t}" for s, t in available_pairs()) or "none"
            raise TranslationUnavailable(
                f"no offline translation from {LANGUAGE_NAMES.get(source, source)} to "
                f"{LANGUAGE_NAMES.get(target, target)} (installed pairs: {pairs}; Debian packages apertium-*)"
            )
        stages = []
        for part in path.read_text().strip().split("|"):
            prog, _, rest = part.strip().replace("$1", "-n").replace("$2", "").partition(" ")
            stages.append(f"{prog} -z {rest}")
        self.source, self.target, self.timeout = source, target, timeout
        self._proc = subprocess.Popen(
            ["bash", "-c", " | ".join(stages)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self._buf = b""
        self._lock = threading.Lock()

    def translate(self, text: str) -> str:
        text = re.sub(r"[\x00\\^$@*<>{}\[\]/]", " ", text).strip()  # apertium's stream-format characters
        if not text:
            return ""
        with self._lock:
            if self._proc.poll() is not None:
                raise TranslationUnavailable("the apertium process has stopped")
            assert self._proc.stdin is not None and self._proc.stdout is not None
            # A second NUL pushes the first through: some stages hold the last
            # character until more input arrives.
            self._proc.stdin.write(text.encode() + b"\0\0")
            self._proc.stdin.flush()
            while True:
                while b"\0" not in self._buf:
                    ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout)
                    if not ready:
                        raise TranslationUnavailable("apertium did not answer in time")
                    chunk = os.read(self._proc.stdout.fileno(), 65536)
                    if not chunk:
                        raise TranslationUnavailable("the apertium process has stopped")
                    self._buf += chunk
                segment, _, self._buf = self._buf.partition(b"\0")
                out = segment.decode("utf-8", "replace").strip()
                if out:
                    break
        if text[-1] in ".!?" and out[-1:] not in ".!?":
            out += text[-1]
        return out

    @property
    def pid(self) -> int | None:
        """The pipeline's process while it runs: one for the translator's whole life."""
        return self._proc.pid if self._proc.poll() is None else None

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


class EspeakVoice:
    """espeak-ng for a language hibari cannot speak; 24 kHz float32 out."""

    rate = 24_000

    def __init__(self, lang: str) -> None:
        exe = shutil.which("espeak-ng")
        if exe is None:
            raise TranslationUnavailable("espeak-ng is not installed")
        listing = subprocess.run([exe, "--voices"], capture_output=True, text=True, check=True).stdout
        langs = [row.split()[1] for row in listing.splitlines()[1:] if len(row.split()) > 1]  # e.g. es, fr-fr
        match = [c for c in langs if c in (lang, f"{lang}-{lang}")] or [c for c in langs if c.startswith(lang + "-")]
        if not match:
            raise TranslationUnavailable(f"espeak-ng has no {LANGUAGE_NAMES.get(lang, lang)} voice")
        self.exe, self.lang = exe, match[0]

    def stream(self, text: str):  # noqa: ANN201 - an iterator of arrays, like the hibari Synthesizer
        wav = subprocess.run(
            [self.exe, "-v", self.lang, "-s", "160", "--stdout", text], capture_output=True, check=True, timeout=10
        ).stdout
        with wave.open(io.BytesIO(wav)) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
            rate = w.getframerate()
        rs = StreamResampler(rate, self.rate, quality="HQ")
        yield np.concatenate([rs.process(pcm), rs.process(np.zeros(0, np.float32), last=True)])


_voices: dict[str, EspeakVoice | None] = {}  # which espeak-ng voice speaks a language: it holds no process
_registry_lock = threading.Lock()


def voice(lang: str) -> EspeakVoice | None:
    with _registry_lock:
        if lang not in _voices:
            try:
                _voices[lang] = EspeakVoice(lang)
            except (TranslationUnavailable, subprocess.SubprocessError, OSError):
                _voices[lang] = None
        return _voices[lang]


@dataclass
class Interpreter:
    """Each segment the user says, in the target language. Its translator (an apertium pipeline) is its own,
    started with it and stopped by `close` when its session ends: no session's end stops another's."""

    source: str = "en"
    target: str = "es"
    segments: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.source != "en":
            raise TranslationUnavailable(
                "the offline recognisers (Moonshine base-en, Whisper tiny.en) understand English only; choose English"
            )
        self.translator = Translator(self.source, self.target)

    def close(self) -> None:
        self.translator.close()

    def reply(self, text: str, ctx: DialogContext) -> Reply:
        self.segments += 1
        translation = self.translator.translate(text) if text.strip() else ""
        return Reply(translation, "translate", lang=self.target, speak=bool(translation))
