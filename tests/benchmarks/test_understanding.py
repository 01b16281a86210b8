"""The understanding benchmark's bookkeeping (the benchmark itself prints figures, not verdicts)."""

from __future__ import annotations

from benchmarks.understanding import score


def test_each_voice_is_scored_apart_and_a_wrong_action_is_counted():
    """A figure over all voices hid that espeak-ng's are heard far worse than hibari's (heldout12 in noise: 69
    and 95 % of the car's requests understood); an action taken for another is worse than a refusal."""
    rows = [
        {"label": "ac_on", "got": "ac_on", "voice": "hibari"},
        {"label": "ac_on", "got": "window_open", "voice": "en-us"},
        {"label": "ac_on", "got": "ask", "voice": "en-us"},
        {"label": "ac_on", "got": "none", "voice": "en-us"},
        {"label": "none", "got": "none", "voice": "hibari"},
        {"label": "none", "got": "time", "voice": "en-us"},
    ]
    s = score(rows)
    assert (s["requests"], s["understood"], s["asked_back"], s["acted_wrongly"]) == (4, 0.25, 0.25, 1)
    assert (s["out_of_scope"], s["out_of_scope_said"]) == (2, 0.5)
    assert s["per_voice"] == {
        "en-us": {"understood": 0.0, "out_of_scope_said": 0.0},
        "hibari": {"understood": 1.0, "out_of_scope_said": 1.0},
    }
    assert "per_voice" not in score([{k: v for k, v in r.items() if k != "voice"} for r in rows])  # typed
