"""The server: app wiring, HTTP, admission, metrics, overload and `--workers N` (agent/server/app.py)."""

from agent.server.app import AgentServer

__all__ = ["AgentServer"]
