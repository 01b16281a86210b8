"""Engines behind one interface (see base.py); `make_engine` picks one by name."""

from __future__ import annotations

from agent.config import EngineConfig
from agent.engines.base import Engine

ENGINES = ("cascade", "echo", "realtime", "qwen3-omni")


def make_engine(cfg: EngineConfig) -> Engine:
    if cfg.name == "echo":
        from agent.engines.echo import EchoEngine

        return EchoEngine(cfg.mode, end_silence_ms=cfg.end_silence_ms)
    if cfg.name == "cascade":
        from agent.engines.cascade import CascadeEngine

        llm = cfg.llm.resolved()
        return CascadeEngine(end_silence_ms=cfg.end_silence_ms, llm=llm if llm.url else None, **cfg.options)
    if cfg.name == "realtime":
        from agent.engines.realtime import RealtimeEngine

        return RealtimeEngine(end_silence_ms=cfg.end_silence_ms, **cfg.options)
    if cfg.name == "qwen3-omni":
        try:
            from agent.engines.qwen3_omni.engine import QwenOmniEngine
        except ImportError as exc:
            from agent.engines.qwen3_omni.loading import ModelLoadError

            raise ModelLoadError(
                f"the qwen3-omni engine needs torch and transformers ({exc.name} is missing): "
                "pip install -e '.[gpu]' (on a CPU-only machine: pip install torch==2.13.0 transformers==5.24.*)"
            ) from exc

        return QwenOmniEngine(end_silence_ms=cfg.end_silence_ms, **cfg.options)
    raise ValueError(f"unknown engine {cfg.name!r}; available: {', '.join(ENGINES)}")
