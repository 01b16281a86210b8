import numpy as np
import pytest

from agent.profiles.policies import make_policy
from agent.profiles.translate import EspeakVoice, TranslationUnavailable, Translator, available_pairs


def test_english_to_spanish_kept_alive():
    t = Translator("en", "es")
    try:
        assert t.translate("Good morning.") == "Buenos días."
        assert "tiempo" in t.translate("The weather is lovely today.")
        pid = t.pid
        for _ in range(5):
            assert t.translate("I would like a cup of coffee.")
        assert pid is not None and t.pid == pid  # one kept-alive pipeline, not a process a sentence
        assert t.translate("") == ""
        assert t.translate("weird ^chars$ [here] / @*") != ""  # stream-format characters are neutralised
    finally:
        t.close()
    assert t.pid is None


def test_pairs_and_clear_errors():
    assert ("en", "es") in available_pairs()
    with pytest.raises(TranslationUnavailable, match="no offline translation"):
        Translator("en", "ja")
    with pytest.raises(ValueError, match="English only"):
        make_policy("translate", {"source_lang": "es", "target_lang": "en"})


def test_spanish_voice():
    audio = next(EspeakVoice("es").stream("Buenos días"))
    assert audio.dtype == np.float32 and 0.3 * 24_000 < audio.size < 3 * 24_000
    assert np.abs(audio).max() > 0.05
    with pytest.raises(TranslationUnavailable, match="no Galician voice"):
        EspeakVoice("gl")
