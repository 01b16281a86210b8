"""Access rules: token, origin, TLS. Each refused with its code; the right ones accepted."""

import asyncio
import json
import logging
import ssl

import pytest
from websockets.asyncio.client import connect

from agent.client import AgentClient
from agent.server.access import origin_ok, self_signed, token_ok
from benchmarks.harness import make_config, running, ws_url


def test_token_and_origin_rules():
    assert token_ok("", None) and token_ok("s3cret", "s3cret")
    assert not token_ok("s3cret", None) and not token_ok("s3cret", "S3cret") and not token_ok("s3cret", 42)
    host = "agent.example:8080"
    assert origin_ok(None, host, [])  # not a browser
    assert origin_ok("http://agent.example:8080", host, [])  # same origin
    assert origin_ok("http://localhost:3000", host, []) and origin_ok("https://127.0.0.1", host, [])
    assert not origin_ok("https://evil.example", host, [])
    assert origin_ok("https://app.example", host, ["https://app.example"])
    assert not origin_ok("null", host, [])


async def test_token_required_in_the_offer(caplog):
    cfg = make_config("echo", "stream")
    cfg.server.token = "open-sesame-42"
    caplog.set_level(logging.DEBUG)
    async with running(cfg) as server:
        for token in (None, "wrong"):
            client = AgentClient(ws_url(server))
            client.token = token
            with pytest.raises(RuntimeError, match="unauthorized"):
                await client.connect()
            await client.close()
        assert not server.sessions
        good = AgentClient(ws_url(server))
        good.token = "open-sesame-42"
        assert (await good.connect())["type"] == "answer"
        await good.close()
    # never logged by us (the CLI keeps the websockets library's frame dumps off at every level)
    ours = [r.getMessage() for r in caplog.records if r.name.split(".")[0] in ("agent", "omni", "media")]
    assert ours and not any("open-sesame-42" in m for m in ours)


async def test_cross_site_page_is_refused_same_origin_accepted():
    async with running(make_config("echo", "stream")) as server:
        async with connect(ws_url(server), origin="https://evil.example") as ws:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert msg == {"type": "error", "code": "unauthorized", "message": "this page's origin may not connect"}
        async with connect(ws_url(server), origin=f"http://127.0.0.1:{server.port}") as ws:
            await ws.send(json.dumps({"type": "dance"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["code"] == "bad_request"  # talked to


async def test_tls_serves_wss_and_refuses_plain(tmp_path):
    cert, key = self_signed(tmp_path)
    cfg = make_config("echo", "stream")
    cfg.server.cert, cfg.server.key = cert, key
    async with running(cfg) as server:
        assert server.url.startswith("https://")
        with pytest.raises(Exception):  # noqa: B017 - a plain client fails in the handshake, whatever it says
            async with connect(ws_url(server), open_timeout=3) as ws:
                await ws.recv()
        ctx = ssl.create_default_context(cafile=cert)
        url = f"wss://localhost:{server.port}/ws"
        async with connect(url, ssl=ctx) as ws:
            await ws.send(json.dumps({"type": "dance"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["code"] == "bad_request"
    # made once, then reused
    assert self_signed(tmp_path) == (cert, key)


def get(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


async def test_the_operators_endpoints_need_their_own_token_and_the_page_does_not(caplog):
    cfg = make_config("echo", "stream")
    cfg.server.token = "page-token-1"
    cfg.server.operator_token = "scrape-token-2"
    caplog.set_level(logging.DEBUG)
    async with running(cfg) as server:
        for path in ("/metrics", "/healthz"):
            for token in (None, "wrong", "page-token-1"):  # the page's token is not the operator's
                status, headers, _ = await asyncio.to_thread(get, server.port, path, token)
                assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), (path, token)
        status, _, body = await asyncio.to_thread(get, server.port, "/metrics", "scrape-token-2")
        assert status == 200 and b"omni_sessions_live" in body
        status, _, body = await asyncio.to_thread(get, server.port, "/healthz", "scrape-token-2")
        assert status == 200 and json.loads(body)["engine"] == "echo"
        status, _, body = await asyncio.to_thread(get, server.port, "/")  # the page needs no token to load
        assert status == 200 and b"<html" in body.lower()
        assert server.http.refused == 6
    assert "scrape-token-2" not in caplog.text  # a secret never reaches the log


async def test_the_page_reads_its_ice_servers_with_the_pages_token(caplog):
    """`/ice`: the servers and policy the page builds its peer with, TURN credentials minted per request from
    the shared secret; with a page token, only for a request that carries it."""
    cfg = make_config("echo", "stream")
    cfg.server.token = "page-token-1"
    cfg.ice.servers = ["turn:127.0.0.1:3478"]
    cfg.ice.secret = "turn-secret-3"
    cfg.ice.relay_only = True
    caplog.set_level(logging.DEBUG)
    async with running(cfg) as server:
        for path in ("/ice", "/ice?token=wrong"):
            status, _, _ = await asyncio.to_thread(get, server.port, path)
            assert status == 401, path
        status, headers, body = await asyncio.to_thread(get, server.port, "/ice?token=page-token-1")
        assert status == 200 and headers["Content-Type"] == "application/json"
        ice = json.loads(body)
        assert ice["iceTransportPolicy"] == "relay"
        (turn,) = ice["iceServers"]
        assert turn["urls"] == ["turn:127.0.0.1:3478"] and turn["username"].endswith(":omni-agent")
    assert "turn-secret-3" not in caplog.text and turn["credential"] not in caplog.text


async def test_without_an_operator_token_the_endpoints_answer_anyone():
    async with running(make_config("echo", "stream")) as server:
        status, _, body = await asyncio.to_thread(get, server.port, "/healthz")
        assert status == 200 and json.loads(body)["engine"] == "echo"
