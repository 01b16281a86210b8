"""A network impairer for tests and benchmarks: a UDP relay on 127.0.0.1 that drops, delays with jitter (which
reorders) and duplicates a client's media on its way to the server, with a seed (this kernel has no netem).

The client is given the relay's address in place of the server's candidate (`route`); ICE, DTLS and SRTP
run through it untouched, and only RTP and RTCP (RFC 7983: first byte 128-191) are impaired, so a session
sets up as on a clean line and then meets the network the benchmark asks for. What the server sends back
passes as it is.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Impairment:
    jitter_ms: float = 0.0  # each packet delayed by 0..jitter_ms, uniformly: later ones overtake it
    loss: float = 0.0  # the share of packets dropped
    duplicate: float = 0.0  # ... and sent twice (the copy 0..jitter_ms after)
    seed: int = 0

    @property
    def label(self) -> str:
        return f"{self.jitter_ms:g} ms / {100 * self.loss:g} %"


@dataclass
class ImpairStats:
    packets: int = 0  # media packets from the client
    dropped: int = 0
    duplicated: int = 0


class Impairer:
    """When each packet arrives at the far side (sans-I/O): none if dropped, two if duplicated."""

    def __init__(self, impairment: Impairment) -> None:
        self.impairment = impairment
        self._rng = random.Random(impairment.seed)
        self.stats = ImpairStats()

    def deliveries(self, now: float) -> list[float]:
        imp, rng, s = self.impairment, self._rng, self.stats
        s.packets += 1
        if rng.random() < imp.loss:
            s.dropped += 1
            return []
        out = [now + rng.uniform(0, imp.jitter_ms) / 1000]
        if rng.random() < imp.duplicate:
            s.duplicated += 1
            out.append(now + rng.uniform(0, imp.jitter_ms) / 1000)
        return out


def is_media(datagram: bytes) -> bool:
    return bool(datagram) and 128 <= datagram[0] <= 191


CANDIDATE = re.compile(r"^(a=candidate:\S+ \d+ udp \d+ )(\S+) (\d+)( typ .*)$", re.IGNORECASE | re.MULTILINE)


class _Side(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Callable[[bytes, tuple[str, int]], None]) -> None:
        self.on_datagram = on_datagram
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.on_datagram(data, addr)


class ImpairingRelay:
    """One client's media to the server through an `Impairer`; everything else both ways as it is.

    Two sockets: one the client is told is the server (`route` on the answer), one the server may be told is
    the client (`route_offer` on the offer; a client whose ICE takes a server's address from its checks, as
    Chromium's does, must be). Each side's address is learnt from the SDP and then from what it sends."""

    def __init__(self, impairment: Impairment) -> None:
        self.impairer = Impairer(impairment)
        self._client: tuple[str, int] | None = None
        self._server: tuple[str, int] | None = None
        self._to_client: _Side | None = None  # the socket the client talks to
        self._to_server: _Side | None = None  # ... and the server
        self._closed = False

    @property
    def stats(self) -> ImpairStats:
        return self.impairer.stats

    async def _open(self) -> tuple[int, int]:
        """The ports the client and the server talk to."""
        if self._to_client is None or self._to_server is None:
            loop = asyncio.get_running_loop()
            local = ("127.0.0.1", 0)
            _, self._to_client = await loop.create_datagram_endpoint(lambda: _Side(self._from_client), local_addr=local)
            _, self._to_server = await loop.create_datagram_endpoint(lambda: _Side(self._from_server), local_addr=local)
        ports = [side.transport.get_extra_info("sockname")[1] for side in (self._to_client, self._to_server)]
        return ports[0], ports[1]

    async def route(self, answer_sdp: str) -> str:
        """The server's answer with its one candidate replaced by this relay, which then forwards to it."""
        found = {(m.group(2), int(m.group(3))) for m in CANDIDATE.finditer(answer_sdp)}
        if len(found) != 1:
            raise ValueError(f"the relay needs the server to offer one candidate, not {sorted(found)}")
        (self._server,) = found
        port, _ = await self._open()
        return CANDIDATE.sub(lambda m: f"{m.group(1)}127.0.0.1 {port}{m.group(4)}", answer_sdp)

    async def route_offer(self, offer_sdp: str) -> str:
        """The client's offer with the relay as its one candidate (its own are dropped)."""
        _, port = await self._open()
        lines = offer_sdp.split("\r\n")
        first = next((ln for ln in lines if CANDIDATE.match(ln)), None)
        if first is None:
            raise ValueError("the offer has no UDP candidate")
        m = CANDIDATE.match(first)
        assert m is not None
        self._client = (m.group(2), int(m.group(3)))
        mine = f"{m.group(1)}127.0.0.1 {port}{m.group(4)}"
        return "\r\n".join(
            mine if ln == first else ln for ln in lines if ln == first or not ln.startswith("a=candidate:")
        )

    def _from_client(self, data: bytes, addr: tuple[str, int]) -> None:
        self._client = addr
        if self._server is None or self._to_server is None or self._to_server.transport is None:
            return
        if not is_media(data):
            self._to_server.transport.sendto(data, self._server)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for at in self.impairer.deliveries(now):
            if at <= now:
                self._to_server.transport.sendto(data, self._server)
            else:
                loop.call_at(at, self._deliver, data)

    def _deliver(self, data: bytes) -> None:
        if not self._closed and self._server and self._to_server is not None and self._to_server.transport:
            self._to_server.transport.sendto(data, self._server)

    def _from_server(self, data: bytes, addr: tuple[str, int]) -> None:
        self._server = addr
        if self._client is not None and self._to_client is not None and self._to_client.transport is not None:
            self._to_client.transport.sendto(data, self._client)

    def close(self) -> None:
        self._closed = True
        for side in (self._to_client, self._to_server):
            if side is not None and side.transport is not None:
                side.transport.close()
