"""Nothing lost: each session's transcript as JSON lines, written as it happens.

One file per session. Every final transcript, tool call and turn's figures
is a line; the file is flushed at every turn's end, so a crash loses at most
the turn in flight.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import IO, Any

KEEP = ("transcript", "tool", "metrics", "error")


class TranscriptLog:
    def __init__(self, directory: str, session: str, **header: Any) -> None:
        self.started = time.monotonic()
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.path = folder / f"{stamp}-{session}.jsonl"
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._write({"type": "session", "session": session, "started": stamp, **header})
        self.flush()

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            record = {"t": round(time.monotonic() - self.started, 3), **record}
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def record(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind not in KEEP or (kind == "transcript" and not msg.get("final")):
            return
        self._write(msg)
        if kind in ("metrics", "error"):
            self.flush()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self, reason: str) -> None:
        if self._file is not None:
            self._write({"type": "end", "reason": reason})
            self._file.close()
            self._file = None
