"""The server: static page, `/healthz`, and the signalling WebSocket at `/ws`.

One asyncio process built on `websockets`. Each WebSocket is one session;
whatever goes wrong in it (bad messages, bad SDP, a failing engine) is
answered with an `error` message and ends that session only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import mimetypes
import os
import secrets
import sys
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agent import __version__
from agent.access import origin_ok, ssl_context, token_ok
from agent.config import Config, profile_config
from agent.engines import make_engine
from agent.engines.base import Engine
from agent.ice import set_host_addresses
from agent.limits import TokenBucket
from agent.metrics import ServerMetrics
from agent.overload import LEVELS, OverloadConfig, OverloadPolicy
from agent.peer import PeerSession
from agent.protocol import Limits, ProtocolError, parse_message
from agent.transcripts import TranscriptLog
from agent.workers import merged_metrics, write_metrics

log = logging.getLogger(__name__)
events = logging.getLogger("omni")  # one structured line per session start/end and per turn


def kv(**fields: Any) -> str:
    """key=value pairs for a log line; values with spaces are quoted."""
    return " ".join(
        f"{k}={json.dumps(v) if isinstance(v, str) and (' ' in v or not v) else v}" for k, v in fields.items()
    )


# The transport's own cap, above our per-message limit so that an oversized
# message still gets a `too_large` answer instead of a bare close.
TRANSPORT_MAX_BYTES = 1 << 20
SEND_QUEUE = 256


class AgentServer:
    def __init__(self, config: Config, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine or make_engine(config.engine)
        self.limits = Limits(config.server.max_message_bytes, config.server.max_sdp_bytes, config.server.max_m_lines)
        self.sessions: dict[str, Connection] = {}
        self.sessions_total = 0
        self.started = time.monotonic()
        self.web_dir = Path(config.server.web_dir).resolve()
        self._server: Server | None = None
        self._monitor: asyncio.Task[None] | None = None
        self.metrics = ServerMetrics(lambda: [c.peer for c in self.sessions.values() if c.peer is not None])
        o = config.overload
        self.overload = OverloadPolicy(
            OverloadConfig(
                first_audio_p95_ms=o.first_audio_p95_ms,
                loop_lag_p95_ms=o.loop_lag_p95_ms,
                escalate_s=o.escalate_s,
                recover_s=o.recover_s,
                window_s=o.window_s,
            )
        )
        set_host_addresses(config.ice.host_addresses)
        self.token = config.server.token or os.environ.get("OMNI_AGENT_TOKEN", "")
        self.ssl = ssl_context(config.server.cert, config.server.key) if config.server.cert else None
        self.accepting = True
        self.realtime_live = 0  # sessions on /v1/realtime

    async def start(self) -> None:
        # Engines compute in threads that share the GIL with this loop, which paces a packet every 20 ms per
        # session; with the default 5 ms switch interval a busy model thread held the loop back long enough to
        # leave gaps in the audio (Qwen3-Omni bench: continuity 0.947 -> 1.000, p50 756 -> 645 ms).
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        # The engine's models and libraries are loaded by now: with torch and transformers a full garbage
        # collection walks ~400k objects in ~220 ms, a stall in every session's audio. Collect once, then keep
        # those objects out of later collections.
        gc.collect()
        gc.freeze()
        self._server = await serve(
            self._handle,
            self.config.server.host,
            self.config.server.port,
            process_request=self._http,
            max_size=TRANSPORT_MAX_BYTES,
            max_queue=16,
            # a client that stops answering must not hold up its session's end
            close_timeout=1.0,
            ssl=self.ssl,
            reuse_port=self.config.server.reuse_port,
        )
        self._monitor = asyncio.get_running_loop().create_task(self._watch_load(), name="load-monitor")

    async def _watch_load(self) -> None:
        """Every 100 ms: how late the loop woke us (its lag), and the overload level."""
        loop = asyncio.get_running_loop()
        period = 0.1
        ticks = 0
        while True:
            ticks += 1
            if self.config.server.metrics_dir and ticks % 10 == 0:  # a sibling's /metrics sums these
                write_metrics(self.config.server.metrics_dir, self.metrics.render())
            start = loop.time()
            await asyncio.sleep(period)
            lag = max(0.0, loop.time() - start - period)
            self.metrics.loop_lag.observe(lag)
            self.overload.observe_loop_lag(lag * 1000)
            jobs = getattr(self.engine, "in_flight", None)
            if isinstance(jobs, int) and jobs > 0:
                self.metrics.engine_jobs.observe(jobs)
            level = self.overload.update(time.monotonic())
            if level is not None:
                self._apply_overload(level)

    def _apply_overload(self, level: int) -> None:
        self.metrics.overload_level.set(level)
        self.metrics.overload_transitions.inc()
        events.warning(kv(event="overload", level=LEVELS[level], pressure=round(self.overload.pressure(), 2)))
        for conn in self.sessions.values():
            if conn.peer is not None:
                conn.peer.set_load_level(level)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = self.config.server.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"{'https' if self.ssl else 'http'}://{shown}:{self.port}/"

    async def shutdown(self, grace: float) -> None:
        """Stop accepting, tell live sessions, give them `grace` seconds to end, then close."""
        self.accepting = False
        if self._server is not None:
            self._server.close(close_connections=False)
        live = list(self.sessions.values())
        events.info(kv(event="shutdown", sessions=len(live), grace_s=grace))
        for conn in live:
            conn.send(
                {"type": "error", "code": "busy", "message": f"the server is shutting down; ending in {grace:g} s"}
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.sessions and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await self.close()

    async def close(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        await asyncio.gather(*(c.close("server shutting down") for c in list(self.sessions.values())))
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.engine.close()

    # ---- HTTP ----

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in ("/ws", "/v1/realtime"):
            return None  # the WebSocket handshake goes on
        if path == "/metrics":
            body = self.metrics.render()
            if self.config.server.metrics_dir:
                body = merged_metrics(self.config.server.metrics_dir, body)
            return _response(connection, HTTPStatus.OK, body, "text/plain; version=0.0.4")
        if path == "/healthz":
            body = {
                "status": "ok",
                "version": __version__,
                "engine": self.engine.name,
                "engine_mode": getattr(self.engine, "mode", None),
                "sessions": len(self.sessions),
                "sessions_total": self.sessions_total,
                "uptime_s": round(time.monotonic() - self.started, 1),
                "overload": self.overload.name,
                "worker": os.getpid(),
            }
            return _response(connection, HTTPStatus.OK, json.dumps(body).encode(), "application/json")
        name = "index.html" if path in ("/", "") else path.lstrip("/")
        target = (self.web_dir / name).resolve()
        if self.web_dir not in target.parents or not target.is_file():
            return _response(connection, HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return _response(connection, HTTPStatus.OK, target.read_bytes(), ctype)

    # ---- WebSocket ----

    async def _handle(self, ws: ServerConnection) -> None:
        if ws.request is not None and ws.request.path.split("?", 1)[0] == "/v1/realtime":
            await self._realtime(ws)
            return
        conn = Connection(self, ws)
        try:
            await conn.run()
        finally:
            await conn.close(conn.peer.end_reason if conn.peer else "socket closed")

    async def _refuse_realtime(self, ws: ServerConnection, reason: str, code: str, message: str) -> None:
        """An OpenAI-style error event, then the close; counted like a refused /ws offer."""
        self.metrics.sessions_refused.labels(reason).inc()
        kind = "invalid_request_error" if code == "unauthorized" else "server_error"
        await ws.send(json.dumps({"type": "error", "error": {"type": kind, "code": code, "message": message}}))
        await ws.close(1008 if code == "unauthorized" else 1013, code)

    async def _realtime(self, ws: ServerConnection) -> None:
        """The OpenAI Realtime protocol over our engine (agent/realtime_api.py)."""
        from agent.realtime_api import RealtimeSession

        headers = ws.request.headers if ws.request is not None else {}
        bearer = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        session = RealtimeSession(self, ws)
        if not origin_ok(headers.get("Origin"), headers.get("Host"), self.config.server.allowed_origins) or not (
            token_ok(self.token, bearer)
        ):
            await self._refuse_realtime(ws, "token", "unauthorized", "a valid API key (the server's token) is needed")
            return
        if len(self.sessions) + self.realtime_live >= self.config.server.max_sessions or self.overload.level >= 3:
            reason = "overload" if self.overload.level >= 3 else "limit"
            await self._refuse_realtime(ws, reason, "busy", "the server is at its limit; try again later")
            return
        self.realtime_live += 1
        self.metrics.sessions_total.inc()
        try:
            await session.run()
        finally:
            self.realtime_live -= 1


def _response(connection: ServerConnection, status: HTTPStatus, body: bytes, ctype: str) -> Response:
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


class Connection:
    """One signalling session: the WebSocket, and the peer once there is an offer."""

    def __init__(self, server: AgentServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.id = secrets.token_hex(6)
        self.peer: PeerSession | None = None
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(SEND_QUEUE)
        self.dropped_messages = 0
        self._has_peer = asyncio.Event()
        self._closed = False
        self.started = time.monotonic()
        self.transcript: TranscriptLog | None = None

    def send(self, msg: dict[str, Any]) -> None:
        if self._closed:
            return
        kind = msg.get("type")
        if self.transcript is not None:
            self.transcript.record(msg)
        if kind == "metrics":
            self._turn_done(msg)
        elif kind == "error":
            self.server.metrics.errors.labels(msg.get("code", "unknown")).inc()
        try:
            self._out.put_nowait(msg)
        except asyncio.QueueFull:
            self.dropped_messages += 1

    def _turn_done(self, msg: dict[str, Any]) -> None:
        self.server.metrics.observe_turn(msg)
        if isinstance(msg.get("first_audio_ms"), int | float):
            self.server.overload.observe_first_audio(msg["first_audio_ms"], time.monotonic())
        figures = {k: v for k, v in msg.items() if k != "type" and v is not None}
        events.info(kv(event="turn", session=self.id, **figures))

    async def _writer(self) -> None:
        while (msg := await self._out.get()) is not None:
            await self.ws.send(json.dumps(msg))

    async def run(self) -> None:
        writer = asyncio.create_task(self._writer(), name=f"{self.id}:writer")
        headers = self.ws.request.headers if self.ws.request is not None else {}
        if not origin_ok(headers.get("Origin"), headers.get("Host"), self.server.config.server.allowed_origins):
            events.warning(kv(event="refused", session=self.id, why="origin", origin=headers.get("Origin", "")))
            self.send({"type": "error", "code": "unauthorized", "message": "this page's origin may not connect"})
            self._out.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 1.0)
            return
        reader = asyncio.create_task(self._reader(), name=f"{self.id}:reader")
        ended = asyncio.create_task(self._peer_ended(), name=f"{self.id}:ended")
        try:
            await asyncio.wait({reader, ended, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (reader, ended):
                t.cancel()
            # flush what is queued (an error, the last state) before closing
            with contextlib.suppress(asyncio.QueueFull):
                self._out.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 1.0)
            writer.cancel()
            await asyncio.gather(reader, ended, writer, return_exceptions=True)

    async def _peer_ended(self) -> None:
        await self._has_peer.wait()
        assert self.peer is not None
        await self.peer.ended.wait()
        log.info("session %s ended: %s", self.id, self.peer.end_reason)

    async def _reader(self) -> None:
        cfg = self.server.config.server
        bucket = TokenBucket(cfg.messages_per_second, 2 * cfg.messages_per_second)
        try:
            async for raw in self.ws:
                try:
                    if not bucket.allow(time.monotonic()):
                        raise ProtocolError(
                            "rate_limited", f"more than {cfg.messages_per_second:g} messages a second", True
                        )
                    msg = parse_message(raw, self.server.limits)
                    if await self._dispatch(msg):
                        return
                except ProtocolError as err:
                    log.info("session %s: %s: %s", self.id, err.code, err.message)
                    self.send(err.to_message())
                    if err.fatal:
                        return
                except Exception as exc:  # a bug must end this session only, and say so
                    log.exception("session %s: failed handling a message", self.id)
                    self.send({"type": "error", "code": "engine", "message": f"internal error: {exc!r}"})
                    return
        except ConnectionClosed:
            return

    async def _dispatch(self, msg: dict[str, Any]) -> bool:
        """Handle one message; True ends the session."""
        kind = msg["type"]
        if kind == "bye":
            return True
        if kind == "offer":
            await self._offer(msg)
            return False
        if self.peer is None or self.peer.session is None:
            raise ProtocolError("bad_request", f"{kind!r} before an offer: send the offer first")
        if kind == "text":
            self.peer.session.send_text(msg["text"])
        elif kind == "interrupt":
            self.peer.session.interrupt()
        elif kind == "client_metrics":
            v2v = msg.get("voice_to_voice_ms")
            if isinstance(v2v, int | float) and 0 <= v2v < 60_000:
                self.server.metrics.latency.labels("voice_to_voice").observe(v2v / 1000)
        return False

    async def _offer(self, msg: dict[str, Any]) -> None:
        if not token_ok(self.server.token, msg.get("token")):
            self.server.metrics.sessions_refused.labels("token").inc()
            raise ProtocolError("unauthorized", "a valid token is needed to start a session", True)
        if not self.server.accepting:
            raise ProtocolError("busy", "the server is shutting down", True)
        if self.peer is not None:
            raise ProtocolError("bad_request", "this session already has a peer; open a new WebSocket to renegotiate")
        limit = self.server.config.server.max_sessions
        if len(self.server.sessions) + self.server.realtime_live >= limit:
            self.server.metrics.sessions_refused.labels("limit").inc()
            raise ProtocolError("busy", f"the server is at its limit of {limit} sessions; try again later", True)
        if self.server.overload.level >= 3:
            self.server.metrics.sessions_refused.labels("overload").inc()
            raise ProtocolError("busy", "the server is overloaded; try again in a moment", True)
        cfg = profile_config(self.server.config, msg.get("profile", self.server.config.profile))
        options = cfg.session_options()
        for key in ("source_lang", "target_lang"):
            if key in msg:
                options[key] = msg[key]
        self.server.sessions[self.id] = self
        self.server.sessions_total += 1
        self.server.metrics.sessions_total.inc()
        self.started = time.monotonic()
        if cfg.server.transcripts_dir:
            self.transcript = TranscriptLog(
                cfg.server.transcripts_dir, self.id, engine=self.server.engine.name, profile=cfg.profile
            )
        self.peer = PeerSession(cfg, self.server.engine, self.send, self.id, options)
        self._has_peer.set()
        answer = await self.peer.answer(msg["sdp"])
        self.peer.set_load_level(self.server.overload.level)
        self.send(
            {
                "type": "answer",
                "sdp": answer,
                "session": self.id,
                "engine": self.server.engine.name,
                "profile": cfg.profile,
                "worker": os.getpid(),
            }
        )
        self.send({"type": "state", "state": "listening"})
        events.info(kv(event="start", session=self.id, engine=self.server.engine.name, profile=cfg.profile))

    async def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.peer is not None:
                await self.peer.close()
        finally:
            self.server.sessions.pop(self.id, None)  # listed until everything of it is freed (its pc closed too)
        if self.peer is not None:
            self.server.metrics.retire(self.peer)  # right after the pop: /metrics never counts it twice or not at all
            if self.transcript is not None:
                self.transcript.close(reason)
            events.info(
                kv(event="end", session=self.id, reason=reason, duration_s=round(time.monotonic() - self.started, 1))
            )
        with contextlib.suppress(Exception):
            await self.ws.close(1000, reason[:100])
