"""Profiles: what the agent is for (a general assistant, an in-car assistant, an interpreter)."""
