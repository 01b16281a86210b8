"""SRTP from the peer handled as each datagram arrives, below aiortc's DTLS transport's receive task.

aiortc passes every datagram through aioice's queue to a task of the DTLS
transport that awaits it, one task step (a future, a wake-up and four
coroutine frames) a packet: ~75 packets a second per audio+video session.
Once DTLS is connected, `DirectReceive` takes RTP and RTCP off the nominated
pair's socket callback and gives them, unprotected, to the same handlers
aiortc's task would call (receiver statistics, jitter buffer, bandwidth
estimate, RTCP routing). STUN (consent) and DTLS (alerts, close) still go the
queued way, so aiortc still sees its transport close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pylibsrtp

from media.rtc import private
from media.rtc.rtp_sender import NTP_UNIX_OFFSET, connected, is_rtcp, nominated_pair, rtp_or_rtcp

log = logging.getLogger(__name__)


def run_now(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to its end now; if it waits on something, a task finishes it.

    aiortc's receive handlers are coroutines that in practice never wait (their
    sends are synchronous underneath); a task per packet would cost what this
    module saves.
    """
    try:
        waiting = coro.send(None)
    except StopIteration:
        return
    asyncio.ensure_future(_finish(coro, waiting))


async def _finish(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    try:
        while True:
            if waiting is None:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
            else:
                await asyncio.wait({waiting})
            waiting = coro.send(None)
    except StopIteration:
        pass
    except Exception as exc:
        log.warning("SRTP handling failed after a wait: %r", exc, exc_info=exc)


class DirectReceive:
    """The nominated pair's RTP and RTCP, unprotected and handled in its socket callback."""

    def __init__(self, dtls: Any, on_fault: Callable[[Exception], None]) -> None:
        pair = nominated_pair(dtls)
        self.dtls = dtls
        self.on_fault = on_fault
        self.protocol = pair.protocol
        self._queued = self.protocol.datagram_received  # aioice's: STUN, then its queue
        self._srtp = private.srtp_in(dtls)
        self.packets = 0  # RTP and RTCP handled here
        self.undecryptable = 0  # failed SRTP authentication or replay checks: dropped, as aiortc does
        self.failed = False
        self.protocol.datagram_received = self._received

    def _received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        if self.failed or not rtp_or_rtcp(data) or not connected(self.dtls):
            self._queued(data, addr)
            return
        dtls = self.dtls
        private.count_received(dtls, data)
        self.packets += 1
        try:
            if is_rtcp(data):
                coro = private.handle_rtcp(dtls, self._srtp.unprotect_rtcp(data))
            else:
                arrival_ms = int((time.time() + NTP_UNIX_OFFSET) * 1000)
                coro = private.handle_rtp(dtls, self._srtp.unprotect(data), arrival_ms)
        except pylibsrtp.Error:
            self.undecryptable += 1
            return
        try:
            run_now(coro)
        except Exception as exc:  # a bug below ends this session; the loop's other sessions go on
            self.failed = True
            log.error("SRTP handling failed: %r", exc, exc_info=exc)
            self.on_fault(exc)

    def close(self) -> None:
        """Give the socket callback back to aioice."""
        if self.protocol.datagram_received == self._received:
            del self.protocol.datagram_received
