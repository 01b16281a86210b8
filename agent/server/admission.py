"""Who may start a session, on either way in: origin, token, shutdown, session limit, overload.

Sans-I/O: the checks read the server settings as they are now (they may be
changed while running) and answer with a `Refused` or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.config import ServerConfig
from agent.server.access import origin_ok, token_ok
from agent.server.overload import Level
from agent.transport.connection import Refused


class Admission:
    def __init__(self, settings: ServerConfig, token: str) -> None:
        self.settings = settings
        self.token = token
        self.accepting = True  # False once shutting down

    def check_origin(self, headers: Mapping[str, str]) -> Refused | None:
        if origin_ok(headers.get("Origin"), headers.get("Host"), self.settings.allowed_origins):
            return None
        return Refused("unauthorized", "this page's origin may not connect", "origin")

    def check(self, token: str | None, live: int, level: Level) -> Refused | None:
        if not token_ok(self.token, token):
            return Refused("unauthorized", "a valid token is needed to start a session", "token")
        if not self.accepting:
            return Refused("busy", "the server is shutting down", "shutdown")
        limit = self.settings.max_sessions
        if live >= limit:
            return Refused("busy", f"the server is at its limit of {limit} sessions; try again later", "limit")
        if level >= Level.REFUSE:
            return Refused("busy", "the server is overloaded; try again in a moment", "overload")
        return None
