"""Which dialog policy answers for a profile on the cascade engine."""

from __future__ import annotations

from typing import Any

from agent.profiles import get_profile
from agent.profiles.dialog import DefaultAssistant, DialogPolicy
from agent.profiles.in_car import InCarAssistant
from agent.profiles.interruption_words import interruption_model
from agent.profiles.translate import Interpreter, TranslationUnavailable
from agent.profiles.understanding import IntentModel


def load_intent_models() -> None:
    """Build the assistants' intent models and the interruptions' now (a few seconds: every example's MiniLM vector,
    and once per machine its int8 model), at start, not in a user's first session."""
    for profile in ("default", "car"):
        IntentModel.for_profile(profile)
    interruption_model()


def make_policy(profile: str, options: dict[str, Any] | None = None) -> DialogPolicy:
    """The policy for a profile (by name, as the offer names it); `options` carries e.g. the translation
    languages. ValueError: an unknown profile, or a translation this machine cannot do."""
    opts = options or {}
    p = get_profile(profile)
    if p.interpreting:
        try:
            return Interpreter(opts.get("source_lang", "en"), opts.get("target_lang", "es"))
        except TranslationUnavailable as exc:
            raise ValueError(str(exc)) from None
    if p.vehicle:
        return InCarAssistant()
    return DefaultAssistant()
