"""The server: app wiring, the page and its HTTP routes, admission, overload, metrics, shutdown.

One asyncio process built on `websockets`. Each WebSocket is one session,
on `/ws` (WebRTC signalling) or `/v1/realtime` (the OpenAI Realtime
protocol); both are admitted here and listed in `sessions`, so limits,
shutdown and the overload policy reach every session whichever way it came.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve

from agent import __version__
from agent.config import Config
from agent.engines import make_engine
from agent.engines.base import Engine
from agent.logs import events, kv
from agent.server.access import ssl_context
from agent.server.admission import Admission
from agent.server.http import HttpRoutes
from agent.server.metrics import ServerMetrics
from agent.server.overload import Level, OverloadPolicy
from agent.server.workers import merged_metrics, write_metrics
from agent.transport.connection import Connection, Refused
from agent.transport.ice import TURN_SCHEMES, check_turn, page_ice
from agent.transport.realtime import RealtimeConnection
from agent.transport.signalling import SignallingConnection
from agent.wire.messages import Error, Metrics
from media.echo_cancel import load_audio_processing
from media.linear_echo import LinearEcho, SpeexUnavailable
from media.rtc.video_decoding import shared_process

log = logging.getLogger(__name__)

# The transport's own cap, above our per-message limit so that an oversized
# message still gets a `too_large` answer instead of a bare close.
TRANSPORT_MAX_BYTES = 1 << 20


class AgentServer:
    def __init__(self, config: Config, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine or make_engine(config.engine)
        self.sessions: dict[str, Connection] = {}  # admitted, until everything of them is freed
        self.sessions_total = 0
        self.started = time.monotonic()
        self._server: Server | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._turn_check: asyncio.Task[None] | None = None
        self.metrics = ServerMetrics(lambda: [c.pump for c in self.sessions.values() if c.pump is not None])
        self.overload = OverloadPolicy(config.overload)
        token = config.server.token or os.environ.get("OMNI_AGENT_TOKEN", "")
        self.admission = Admission(config.server, token)
        self.ssl = ssl_context(config.server.cert, config.server.key) if config.server.cert else None
        operator = config.server.operator_token or os.environ.get("OMNI_OPERATOR_TOKEN", "")
        config.ice = config.ice.with_environment()  # the TURN credentials, for the page and the server's peer
        self.http = HttpRoutes(
            config.server.web_dir, self._metrics_body, self._health, operator, lambda: page_ice(config.ice), token
        )

    async def _check_turn(self) -> None:
        """Say in the log at start whether each TURN server takes the credentials the peers get."""
        for url, problem in (await check_turn(self.config.ice)).items():
            if problem is None:
                log.info("TURN server %s allocates relays with the configured credentials", url)
            else:
                log.error("TURN server %s gives no relay: %s; peers that need it cannot connect", url, problem)

    @property
    def accepting(self) -> bool:
        return self.admission.accepting

    @property
    def realtime_live(self) -> int:
        """Sessions on /v1/realtime."""
        return sum(1 for c in self.sessions.values() if c.protocol == "realtime")

    async def start(self) -> None:
        if self.config.media.echo_cancellation != "off":
            try:  # 0.2 s to import: on the loop at a session's first reply it was a gap in every session's audio
                load_audio_processing()
            except Exception as exc:  # each session then says so and goes on without it
                log.error("the echo canceller's library did not load: %r", exc)
            if self.config.media.linear_heard:
                try:
                    LinearEcho().close()
                except SpeexUnavailable as exc:  # counted per session too (omni_echo_events{event="linear_failures"})
                    log.warning("speech over a held reply is heard from AEC3 alone: %s", exc)
        shared_process().start()  # the camera decoders' process, before the first session needs it
        if any(url.startswith(TURN_SCHEMES) for url in self.config.ice.servers):
            self._turn_check = asyncio.create_task(self._check_turn(), name="turn-check")
        self._server = await serve(
            self._handle,
            self.config.server.host,
            self.config.server.port,
            process_request=self.http,
            max_size=TRANSPORT_MAX_BYTES,
            max_queue=16,
            # a client that stops answering must not hold up its session's end
            close_timeout=1.0,
            ssl=self.ssl,
            reuse_port=self.config.server.reuse_port,
        )
        self._monitor = asyncio.get_running_loop().create_task(self._watch_load(), name="load-monitor")

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = self.config.server.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"{'https' if self.ssl else 'http'}://{shown}:{self.port}/"

    # ---- connections (the transports' `Host`) ----

    async def _handle(self, ws: ServerConnection) -> None:
        path = ws.request.path.split("?", 1)[0] if ws.request is not None else "/ws"
        kind = RealtimeConnection if path == "/v1/realtime" else SignallingConnection
        conn = kind(self, ws, secrets.token_hex(6))
        try:
            await conn.run()
        finally:
            await conn.close(conn.end_reason or "socket closed")

    def _refused(self, no: Refused) -> None:
        self.metrics.sessions_refused.labels(no.reason).inc()
        raise no

    def check_origin(self, conn: Connection) -> None:
        no = self.admission.check_origin(conn.headers)
        if no is not None:
            self._refused(no)

    def admit(self, conn: Connection, token: str | None) -> None:
        no = self.admission.check(token, len(self.sessions), self.overload.level)
        if no is not None:
            self._refused(no)
        conn.admitted = True
        self.sessions[conn.id] = conn
        self.sessions_total += 1
        self.metrics.sessions_total.inc()

    def opened(self, conn: Connection) -> None:
        self._set_load(conn, self.overload.level)
        events.info(
            kv(event="start", session=conn.id, engine=self.engine.name, profile=conn.config.profile, via=conn.protocol)
        )

    def release(self, conn: Connection, reason: str) -> None:
        self.sessions.pop(conn.id, None)
        if conn.pump is not None:
            self.metrics.retire(conn.pump)  # right after the pop: /metrics never counts it twice or not at all
            duration = round(time.monotonic() - conn.started, 1)
            events.info(kv(event="end", session=conn.id, reason=reason, duration_s=duration))

    def turn_done(self, session_id: str, figures: Metrics) -> None:
        self.metrics.observe_turn(figures)
        first_audio = figures.figures.get("first_audio_ms")
        if isinstance(first_audio, int | float) and not isinstance(first_audio, bool):
            self.overload.observe_first_audio(first_audio, time.monotonic())
        shown = {k: v for k, v in figures.figures.items() if v is not None}
        events.info(kv(event="turn", session=session_id, turn=figures.turn, **shown))

    def error_sent(self, code: str) -> None:
        self.metrics.errors.labels(code).inc()

    def observe_voice_to_voice(self, ms: float) -> None:
        self.metrics.latency.labels("voice_to_voice").observe(ms / 1000)

    # ---- load ----

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

    def _apply_overload(self, level: Level) -> None:
        self.metrics.overload_level.set(level)
        self.metrics.overload_transitions.inc()
        events.warning(kv(event="overload", level=level.name.lower(), pressure=round(self.overload.pressure(), 2)))
        for conn in self.sessions.values():
            self._set_load(conn, level)

    @staticmethod
    def _set_load(conn: Connection, level: Level) -> None:
        if conn.pump is not None:
            conn.pump.set_load(shed_video=level >= Level.SHED_VIDEO, text_only=level >= Level.TEXT_ONLY)

    # ---- HTTP ----

    def _metrics_body(self) -> bytes:
        body = self.metrics.render()
        if self.config.server.metrics_dir:
            body = merged_metrics(self.config.server.metrics_dir, body)
        return body

    def _health(self) -> dict[str, Any]:
        return {
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

    # ---- the end ----

    async def shutdown(self, grace: float) -> None:
        """Stop accepting, tell live sessions, give them `grace` seconds to end, then close."""
        self.admission.accepting = False
        if self._server is not None:
            self._server.close(close_connections=False)
        live = list(self.sessions.values())
        events.info(kv(event="shutdown", sessions=len(live), grace_s=grace))
        for conn in live:
            conn.send(Error("busy", f"the server is shutting down; ending in {grace:g} s"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.sessions and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await self.close()

    async def close(self) -> None:
        for task in (self._monitor, self._turn_check):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(c.close("server shutting down") for c in list(self.sessions.values())))
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.engine.close()
