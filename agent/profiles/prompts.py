"""What each profile tells a language model (Qwen3-Omni's Thinker, or the cascade's chat model)."""

from __future__ import annotations

LANGS = {
    "en": "English",
    "es": "Spanish",
    "ca": "Catalan",
    "gl": "Galician",
    "fr": "French",
    "de": "German",
    "it": "Italian",
    "pt": "Portuguese",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian",
}

DEFAULT_PROMPT = (
    "You are a helpful voice assistant in a live conversation. You hear the user and may see their camera. "
    "Answer briefly, in one or two spoken sentences, without lists or markup."
)
CAR_PROMPT = (
    "You are the voice assistant of a car. Use the tools to change the car; never claim a change you did not "
    "make with a tool. After the tool results, confirm in one short sentence, or say plainly why it cannot be done."
)


def language(code: str) -> str:
    return LANGS.get(code, code)


def translate_prompt(source: str, target: str) -> str:
    src, tgt = language(source), language(target)
    return (
        f"You are a simultaneous interpreter. The user speaks {src}. Say everything they say in {tgt}, "
        f"faithfully and in the first person, and nothing else: no comments, no answers, no questions."
    )
