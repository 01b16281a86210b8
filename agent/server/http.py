"""The plain HTTP side of the server: the page, `/ice`, `/healthz`, `/metrics`; WebSocket paths pass through.

`/ice` gives the page the ICE servers to build its peer with (TURN credentials included): with a page token
set, only to a request that carries it (`?token=`, as the page's own URL does).

The operator's endpoints (`/metrics`, `/healthz`) answer anyone unless an operator token is set; then only a
request with `Authorization: Bearer <token>` (what Prometheus sends with `authorization: {credentials: ...}`).
The page's token does not open them, nor theirs the page: a scraper's secret is not a user's."""

from __future__ import annotations

import json
import logging
import mimetypes
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from agent.server.access import token_ok

WEBSOCKET_PATHS = ("/ws", "/v1/realtime")
OPERATOR_PATHS = ("/metrics", "/healthz")


class _HideCredentials(logging.Filter):
    """websockets writes every request header to its debug log: an Authorization header's value is left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.msg == "< %s: %s" and isinstance(args, tuple) and str(args[0]).lower() == "authorization":
            record.args = (args[0], "(hidden)")
        return True


logging.getLogger("websockets.server").addFilter(_HideCredentials())


class HttpRoutes:
    def __init__(
        self,
        web_dir: str,
        metrics: Callable[[], bytes],
        health: Callable[[], dict[str, Any]],
        operator_token: str = "",
        ice: Callable[[], dict[str, Any]] = lambda: {"iceServers": [], "iceTransportPolicy": "all"},
        page_token: str = "",
    ) -> None:
        self.web_dir = Path(web_dir).resolve()
        self.ice = ice
        self.page_token = page_token
        self.metrics = metrics
        self.health = health
        self.operator_token = operator_token
        self.refused = 0  # operator requests without the token

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in WEBSOCKET_PATHS:
            return None  # the WebSocket handshake goes on
        if path in OPERATOR_PATHS and self.operator_token:
            given = request.headers.get("Authorization", "")
            if not given.startswith("Bearer ") or not token_ok(self.operator_token, given.removeprefix("Bearer ")):
                self.refused += 1
                body = b"this needs the operator's token\n"
                reply = response(connection, HTTPStatus.UNAUTHORIZED, body, "text/plain")
                reply.headers["WWW-Authenticate"] = 'Bearer realm="omni-agent operator"'
                return reply
        if path == "/ice":
            given = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
            if not token_ok(self.page_token, given):
                return response(connection, HTTPStatus.UNAUTHORIZED, b"this needs the page's token\n", "text/plain")
            return response(connection, HTTPStatus.OK, json.dumps(self.ice()).encode(), "application/json")
        if path == "/metrics":
            return response(connection, HTTPStatus.OK, self.metrics(), "text/plain; version=0.0.4")
        if path == "/healthz":
            return response(connection, HTTPStatus.OK, json.dumps(self.health()).encode(), "application/json")
        name = "index.html" if path in ("/", "") else path.lstrip("/")
        target = (self.web_dir / name).resolve()
        if self.web_dir not in target.parents or not target.is_file():
            return response(connection, HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return response(connection, HTTPStatus.OK, target.read_bytes(), ctype)


def response(connection: ServerConnection, status: HTTPStatus, body: bytes, ctype: str) -> Response:
    base = connection.respond(status, "")
    headers = Headers()
    for name in ("Date", "Server", "Connection"):
        if name in base.headers:
            headers[name] = base.headers[name]
    charset = "; charset=utf-8" if ctype.startswith("text/") or "javascript" in ctype else ""
    headers["Content-Type"] = ctype + charset
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-cache"
    return Response(base.status_code, base.reason_phrase, headers, body)
