"""`/ws`: the signalling WebSocket of one WebRTC session (protocol: agent/wire/signalling.py).

The client sends an offer (all ICE candidates in it), typed text,
interrupts and its own latency figures; the server answers, then sends the
session's messages (state, transcripts, tools, turn metrics, errors).
Whatever goes wrong here is answered with an `error` and ends this session
only.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from websockets.exceptions import ConnectionClosed

from agent.config import profile_config
from agent.logs import events, kv
from agent.transport.connection import Connection, Refused
from agent.transport.limits import TokenBucket
from agent.transport.peer import Peer
from agent.wire.messages import (
    Answer,
    Bye,
    ClientMessage,
    ClientMetrics,
    Error,
    Interrupt,
    Offer,
    State,
    Text,
)
from agent.wire.signalling import KIND, Limits, ProtocolError, parse_message

log = logging.getLogger(__name__)


class SignallingConnection(Connection):
    protocol = "ws"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.host.config.server
        self.limits = Limits(cfg.max_message_bytes, cfg.max_sdp_bytes, cfg.max_m_lines)
        self.peer: Peer | None = None

    def refuse(self, no: Refused) -> None:
        events.warning(kv(event="refused", session=self.id, why=no.reason, origin=self.headers.get("Origin", "")))
        super().refuse(no)

    async def serve(self) -> None:
        cfg = self.host.config.server
        bucket = TokenBucket(cfg.messages_per_second, 2 * cfg.messages_per_second)
        try:
            async for raw in self.ws:
                try:
                    if not bucket.allow(time.monotonic()):
                        raise ProtocolError(
                            "rate_limited", f"more than {cfg.messages_per_second:g} messages a second", True
                        )
                    msg = parse_message(raw, self.limits)
                    if await self._dispatch(msg):
                        return
                except ProtocolError as err:
                    log.info("session %s: %s: %s", self.id, err.code, err.message)
                    self.send(err.to_message())
                    if err.fatal:
                        return
                except Exception as exc:  # a bug must end this session only, and say so
                    log.exception("session %s: failed handling a message", self.id)
                    self.send(Error("engine", f"internal error: {exc!r}"))
                    return
        except ConnectionClosed:
            return

    async def _dispatch(self, msg: ClientMessage) -> bool:
        """Handle one message; True ends the session."""
        if isinstance(msg, Bye):
            return True
        if isinstance(msg, Offer):
            await self._offer(msg)
            return False
        if self.pump is None:
            raise ProtocolError("bad_request", f"{KIND[type(msg)]!r} before an offer: send the offer first")
        if isinstance(msg, Text):
            self.pump.send_text(msg.text)
        elif isinstance(msg, Interrupt):
            self.pump.interrupt()
        elif isinstance(msg, ClientMetrics) and msg.voice_to_voice_ms is not None:
            self.host.observe_voice_to_voice(msg.voice_to_voice_ms)
        return False

    async def _offer(self, offer: Offer) -> None:
        if self.peer is not None:
            raise ProtocolError("bad_request", "this session already has a peer; open a new WebSocket to renegotiate")
        try:
            self.host.admit(self, offer.token)
        except Refused as no:
            raise ProtocolError(no.code, no.message, True) from None
        cfg = profile_config(self.host.config, offer.profile or self.host.config.profile)
        options = cfg.session_options()
        if offer.source_lang is not None:
            options["source_lang"] = offer.source_lang
        if offer.target_lang is not None:
            options["target_lang"] = offer.target_lang
        self.peer = Peer(self, cfg)
        answer = await self.peer.answer(
            offer.sdp, options, text_only=offer.text_only, echo_cancelled=offer.echo_cancelled
        )
        self.send(Answer(answer, self.id, self.host.engine.name, cfg.profile, os.getpid()))
        self.send(State("listening"))

    async def close_transport(self) -> None:
        if self.peer is not None:
            await self.peer.close()
