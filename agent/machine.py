"""Which processor a figure was measured on (`lscpu`'s model name and the vector flags that matter)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpuinfo() -> dict[str, str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines) if k.strip()}


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or "cpu"


def machine() -> str:
    """e.g. 'AMD EPYC 7B13, 2 cores, avx2' (avx512f listed when present)."""
    flags = set(_cpuinfo().get("flags", "").split())
    vector = [f for f in ("avx2", "avx512f", "amx_tile") if f in flags]
    return f"{cpu_name()}, {os.cpu_count()} cores" + (f", {' '.join(vector)}" if vector else "")
