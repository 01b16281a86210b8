"""One client connection, whichever protocol: admission, a bounded writer, the session pump, the end.

`Host` is what a connection asks of the server above it (agent/server/app.py
implements it); connections only point down, so admission, overload and
metrics stay the server's own. Subclasses read their protocol
(`signalling.py`, `realtime.py`) and write the pump's messages in it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from websockets.asyncio.server import ServerConnection

from agent.config import Config
from agent.engines.base import Engine, EngineSession
from agent.profiles import get_profile
from agent.session.pump import SessionObserver, SessionPump
from agent.session.transcripts import TranscriptLog
from agent.wire.messages import Error, ServerMessage, to_wire

log = logging.getLogger(__name__)
SEND_QUEUE = 256  # messages waiting for a slow client; beyond it they are dropped (counted)


class Refused(Exception):
    """A connection may not start a session."""

    def __init__(self, code: str, message: str, reason: str) -> None:
        super().__init__(message)
        self.code = code  # what the client sees: unauthorized, busy
        self.message = message
        self.reason = reason  # the metrics label: origin, token, shutdown, limit, overload


class Host(SessionObserver, Protocol):
    config: Config
    engine: Engine

    def check_origin(self, conn: Connection) -> None:
        """Raises Refused when the page's origin may not connect."""
        ...

    def admit(self, conn: Connection, token: str | None) -> None:
        """Token, shutdown, session limit, overload: raises Refused, or counts and lists the session."""
        ...

    def opened(self, conn: Connection) -> None:
        """The session's pump runs: it takes the current overload level."""
        ...

    def release(self, conn: Connection, reason: str) -> None:
        """Everything of the session is freed: unlist it, keep its counts."""
        ...

    def observe_voice_to_voice(self, ms: float) -> None: ...


class Connection(abc.ABC):
    protocol = ""

    def __init__(self, host: Host, ws: ServerConnection, session_id: str) -> None:
        self.host = host
        self.ws = ws
        self.id = session_id
        self.config = host.config  # the session's own (with its profile's settings) once admitted
        self.pump: SessionPump | None = None
        self.engine_session: EngineSession | None = None
        self.transcript: TranscriptLog | None = None
        self.admitted = False
        self.started = time.monotonic()
        self.ended = asyncio.Event()
        self.end_reason = ""
        self.dropped_messages = 0
        self.close_code = 1000
        self.tasks: list[asyncio.Task[Any]] = []
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(SEND_QUEUE)
        self._closed = False

    @property
    def headers(self) -> Any:
        return self.ws.request.headers if self.ws.request is not None else {}

    # ---- out ----

    def send(self, msg: ServerMessage) -> None:
        """A session message: through the pump once there is one (recorded, counted)."""
        if self._closed:
            return
        if self.pump is not None:
            self.pump.emit(msg)
            return
        if isinstance(msg, Error):
            self.host.error_sent(msg.code)
        self.deliver(msg)

    def deliver(self, msg: ServerMessage) -> None:
        """Write a session message in this connection's protocol (`/ws`'s JSON unless it has its own)."""
        self.write(to_wire(msg))

    def write(self, event: dict[str, Any]) -> None:
        try:
            self._out.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped_messages += 1

    async def _writer(self) -> None:
        while (event := await self._out.get()) is not None:
            await self.ws.send(json.dumps(event))

    # ---- the session ----

    async def open_session(self, cfg: Config, options: dict[str, Any]) -> SessionPump:
        """Open the engine session and its pump (after `admit`); ValueError if the engine cannot."""
        self.config = cfg
        engine = self.host.engine
        self.engine_session = await engine.open_session(get_profile(cfg.profile), options)
        if cfg.server.transcripts_dir:
            self.transcript = TranscriptLog(
                cfg.server.transcripts_dir, self.id, engine=engine.name, profile=cfg.profile
            )
        self.pump = SessionPump(
            self.id, self.engine_session, self.deliver, engine.live_output, cfg.media, self.host, self.transcript
        )
        self.spawn(self.pump.run(), "session")
        self.spawn(self._time_limit(cfg.server.max_session_s), "limit")
        self.host.opened(self)
        return self.pump

    async def _time_limit(self, longest: float) -> None:
        await asyncio.sleep(longest)
        self.fail("timeout", f"sessions last at most {longest:g} s; this one has ended")

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.id}:{name}")
        task.add_done_callback(self._task_done)
        self.tasks.append(task)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None and task.get_name().endswith(":session"):
            self.end("the engine ended the session")
        elif exc is not None:
            log.error("session %s: %s failed: %r", self.id, task.get_name(), exc, exc_info=exc)
            self.fail("engine", f"{task.get_name().split(':')[-1]} stopped: {exc}")

    def fail(self, code: str, message: str) -> None:
        if not self.ended.is_set():
            self.send(Error(code, message))
        self.end(message)

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            self.ended.set()

    # ---- the connection's life ----

    async def run(self) -> None:
        """Serve until the client leaves or the session ends; then flush what is queued (an error, the last
        state) and stop writing."""
        writer = asyncio.create_task(self._writer(), name=f"{self.id}:writer")
        try:
            try:
                self.host.check_origin(self)
            except Refused as no:
                self.refuse(no)
                return
            reader = asyncio.create_task(self.serve(), name=f"{self.id}:reader")
            ended = asyncio.create_task(self.ended.wait(), name=f"{self.id}:ended")
            try:
                await asyncio.wait({reader, ended, writer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (reader, ended):
                    t.cancel()
                await asyncio.gather(reader, ended, return_exceptions=True)
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                self._out.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 1.0)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    @abc.abstractmethod
    async def serve(self) -> None:
        """Read the client's messages, in this connection's protocol, until it leaves."""

    def refuse(self, no: Refused) -> None:
        """Tell the client why it may not have a session."""
        self.send(Error(no.code, no.message))

    async def close_transport(self) -> None:
        """Free what the protocol holds (a peer connection); the session's tasks are cancelled already.
        Nothing, for a protocol that holds nothing besides its WebSocket."""
        return None

    async def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self.end(reason)
        current = asyncio.current_task()
        others = [t for t in self.tasks if t is not current]
        for t in others:
            t.cancel()
        try:
            await self.close_transport()
            if self.engine_session is not None:
                with contextlib.suppress(Exception):
                    await self.engine_session.close()
            if others:
                await asyncio.wait(others, timeout=1.0)
        finally:
            if self.admitted:
                self.host.release(self, reason)  # listed until everything of it is freed
            if self.transcript is not None:
                self.transcript.close(reason)
        with contextlib.suppress(Exception):
            await self.ws.close(self.close_code, reason[:100])
