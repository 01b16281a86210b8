"""Admission, sans-I/O: what refuses a session, in which order, and under which metrics label."""

from __future__ import annotations

from agent.config import ServerConfig
from agent.server.admission import Admission
from agent.server.overload import Level


def test_refusals_in_order():
    settings = ServerConfig(max_sessions=2)
    a = Admission(settings, token="s3cret")
    assert a.check("s3cret", 1, Level.TEXT_ONLY) is None
    assert a.check("wrong", 5, Level.REFUSE).reason == "token"  # no token, no other answer
    assert a.check("s3cret", 2, Level.NORMAL).reason == "limit"
    assert a.check("s3cret", 0, Level.REFUSE).reason == "overload"
    settings.max_sessions = 9  # read as it is now: the settings may change while running
    assert a.check("s3cret", 2, Level.NORMAL) is None
    a.accepting = False
    no = a.check("s3cret", 0, Level.NORMAL)
    assert (no.code, no.reason) == ("busy", "shutdown") and "shutting down" in no.message


def test_origins():
    a = Admission(ServerConfig(allowed_origins=["https://app.example"]), token="")
    assert a.check_origin({}) is None  # not a browser
    assert a.check_origin({"Origin": "http://127.0.0.1:8080", "Host": "x"}) is None
    assert a.check_origin({"Origin": "https://agent.example", "Host": "agent.example"}) is None
    assert a.check_origin({"Origin": "https://app.example", "Host": "agent.example"}) is None
    no = a.check_origin({"Origin": "https://evil.example", "Host": "agent.example"})
    assert (no.code, no.reason) == ("unauthorized", "origin")
    assert a.check(None, 0, Level.NORMAL) is None  # no token configured: none needed
