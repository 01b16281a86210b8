"""The voice-to-voice benchmark's corpus and its bookkeeping (the benchmark itself prints figures, not verdicts)."""

from __future__ import annotations

import numpy as np

from benchmarks import corpus
from benchmarks.voice_to_voice import chromium_rows, summarise


def test_the_corpus_is_wide_enough_that_a_figure_cannot_be_tuned():
    clips = corpus.clips()
    s = corpus.summary(clips)
    print(s)
    assert s["utterances"] >= 60
    assert all(s["kinds"][k] >= 5 for k in ("question", "command", "statement", "camera"))
    assert len([v for v, n in s["voices"].items() if n >= 10]) >= 4
    assert {v.sex for v in corpus.VOICES} == {"m", "f"}
    assert all(140 <= v.wpm <= 200 for v in corpus.VOICES if v.engine == "espeak")
    assert 0.8 <= s["speech_seconds"]["min"] and s["speech_seconds"]["max"] <= 6.5
    assert len({c.entry.said for c in clips}) == len(clips)  # no phrase twice
    hesitant = [c for c in clips if c.pause_s]
    assert len(hesitant) >= 10 and {c.pause_s for c in hesitant} == {0.6, 0.8, 1.0, 1.2}
    for c in hesitant[:4]:  # the hesitation is a real silence of its length inside the utterance
        voiced = np.abs(c.audio) > corpus.LOUD
        start, end = np.flatnonzero(voiced)[[0, -1]]
        runs = np.diff(np.flatnonzero(voiced[start : end + 1]))
        assert abs(runs.max() / corpus.RATE - c.pause_s) < 0.05


def test_road_noise_is_seeded_unit_rms_and_mostly_low():
    a, b = corpus.road_noise(2.0, 1), corpus.road_noise(2.0, 1)
    np.testing.assert_array_equal(a, b)
    assert abs(np.sqrt(np.mean(a**2)) - 1) < 1e-3
    spectrum = np.abs(np.fft.rfft(a)) ** 2
    f = np.fft.rfftfreq(a.size, 1 / corpus.RATE)
    assert spectrum[f < 300].sum() > spectrum[f >= 300].sum()


def test_the_pages_turns_are_matched_to_the_slots_they_were_heard_in_and_a_split_is_counted_not_timed():
    clips = corpus.clips(limit=4)
    starts = [4.0, 10.0, 16.0, 22.0]  # where each clip starts in the page's WAV

    def user(turn, at_s, text="misheard, whatever it was"):
        return {"type": "transcript", "role": "user", "final": True, "turn": turn, "text": text, "at_s": at_s}

    def metrics(turn):
        return {"type": "metrics", "turn": turn, "endpoint_ms": 240, "first_audio_ms": 10, "end_reason": "silence"}

    heard = ((1, 6.5), (2, 11.2), (3, 12.9), (4, 25.0))  # clip 2 was not heard at all
    messages = [m for turn, at in heard for m in (user(turn, at), metrics(turn))]
    rows = chromium_rows(clips, starts, "clean", messages, {1: 500.0, 2: 300.0, 3: 420.0, 4: 610.0})
    assert [r["turns"] for r in rows] == [1, 2, 0, 1]
    assert [r["voice_to_voice_ms"] for r in rows] == [500.0, None, None, 610.0]
    assert rows[0]["transport_ms"] == 500.0 - 250
    s = summarise(rows)["chromium/clean"]
    assert (s["turns"], s["timed"], s["split"], s["lost"]) == (4, 2, 1, 1)
    assert s["voice_to_voice_ms"]["median"] == 555


def test_a_split_turn_that_the_second_part_continued_is_judged_on_what_the_engine_finally_heard():
    """A barge-in just after a turn carries that turn's audio (interruptions_continued): its transcript holds the
    first part's words too, and joined to the first part's they would count twice."""
    clips = corpus.clips(limit=2)
    said = clips[1].entry.said
    first = said.split(" ", 1)[0]
    messages = [
        {"type": "transcript", "role": "user", "final": True, "turn": 1, "text": clips[0].entry.said, "at_s": 5.0},
        {"type": "metrics", "turn": 1, "endpoint_ms": 240, "first_audio_ms": 10},
        {"type": "transcript", "role": "user", "final": True, "turn": 2, "text": first, "at_s": 11.0},
        {"type": "metrics", "turn": 2, "endpoint_ms": 240, "first_audio_ms": 10, "interrupted": True},
        {"type": "transcript", "role": "user", "final": True, "turn": 3, "text": said, "at_s": 12.0},
        {"type": "metrics", "turn": 3, "endpoint_ms": 240, "first_audio_ms": 10, "interruptions_continued": 1},
    ]
    rows = chromium_rows(clips, [4.0, 10.0], "clean", messages, {})
    assert (rows[1]["turns"], rows[1]["continued"], rows[1]["heard"], rows[1]["wer"]) == (2, 1, said, 0.0)
    # the first clip's turn is not continued by the second clip's (a continuation stays within its clip)
    assert (rows[0]["heard"], rows[0]["continued"]) == (clips[0].entry.said, 0)
    messages[-1] = {**messages[-1], "interruptions_continued": 0}
    assert chromium_rows(clips, [4.0, 10.0], "clean", messages, {})[1]["heard"] == f"{first} / {said}"
