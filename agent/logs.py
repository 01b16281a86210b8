"""The structured event log: one `key=value` line per session start and end, per turn, per overload change."""

from __future__ import annotations

import json
import logging
from typing import Any

events = logging.getLogger("omni")


def kv(**fields: Any) -> str:
    """key=value pairs for a log line; values with spaces are quoted."""
    return " ".join(
        f"{k}={json.dumps(v) if isinstance(v, str) and (' ' in v or not v) else v}" for k, v in fields.items()
    )
