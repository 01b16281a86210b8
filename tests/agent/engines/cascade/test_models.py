"""The offline components on real data: speech from espeak-ng, a real face photo."""

import numpy as np
import pytest
import skimage.data

from agent.engines.cascade.models import SileroDetector, load_models
from tests.support import spoken, wer


@pytest.fixture(scope="module")
def models():
    return load_models()


def test_vad_hears_speech_not_silence_or_noise(tmp_path):
    speech = spoken("The weather is lovely today.", tmp_path, rate=16_000)
    det = SileroDetector()
    ticks = [speech[i : i + 1280] for i in range(0, speech.size - 1280, 1280)]
    voiced = [det(t) for t in ticks]
    assert sum(voiced) >= len(ticks) // 2
    det = SileroDetector()
    noise = np.random.default_rng(0).standard_normal(16_000 * 2).astype(np.float32) * 0.05
    assert not any(det(noise[i : i + 1280]) for i in range(0, noise.size, 1280))
    assert not any(det(np.zeros(1280, np.float32)) for _ in range(10))


def test_recogniser_on_espeak(models, tmp_path):
    for text in ("What time is it?", "Repeat after me: the sky is blue.", "How many people do you see?"):
        heard = models.recognizer.transcribe(spoken(text, tmp_path, rate=16_000))
        assert wer(text, heard) <= 0.25, heard


def test_synthesiser_streams_sentences_at_24k(models):
    parts = list(models.synthesizer.stream("Hello there. This is the second sentence."))
    assert len(parts) == 2
    assert all(p.dtype == np.float32 and 0.3 * 24_000 < p.size < 4 * 24_000 for p in parts)
    assert max(np.abs(p).max() for p in parts) > 0.05


def test_face_counter_on_real_photos(models):
    face = skimage.data.astronaut()
    assert models.faces.count(face) == 1
    assert models.faces.count(np.concatenate([face, face[:, ::-1]], axis=1)) == 2
    assert models.faces.count(skimage.data.coffee()) == 0
    assert models.faces.count_in([face, face, skimage.data.coffee()]) == 1


def test_speech_starts_at_once(models):
    first = next(models.synthesizer.stream("It's 9:53 AM."))
    onset = np.flatnonzero(np.abs(first) > 0.01)[0]
    assert onset <= 24_000 * 0.02  # no padding before the voice: it would be pure latency
