"""The embedded default engine: offline VAD, ASR, dialog, TTS and face counting on a CPU."""

from agent.engines.cascade.engine import CascadeEngine

__all__ = ["CascadeEngine"]
