"""Process-wide settings for a real-time server, made once by whoever owns the process (the CLI's `serve`, the
tests' and benchmarks' in-process servers), not by each `AgentServer`."""

from __future__ import annotations

import gc
import sys


def tune_for_real_time() -> None:
    """Call once the engine's models are loaded and the server is up."""
    # Engines compute in threads that share the GIL with the loop, which paces a packet every 20 ms per session;
    # with the default 5 ms switch interval a busy model thread held the loop back long enough to leave gaps in
    # the audio (Qwen3-Omni bench: continuity 0.947 -> 1.000, p50 756 -> 645 ms).
    sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
    # With torch and transformers loaded a full garbage collection walks ~400k objects in ~220 ms, a stall in
    # every session's audio. Collect once, then keep those objects out of later collections.
    gc.collect()
    gc.freeze()
