"""ICE settings: host candidates, and the STUN/TURN servers both peers use.

aioice gathers host candidates from every interface except loopback, so on a
machine whose only interface is loopback (a container, `unshare -n`) it
offers nothing and no peer can connect. We choose the list ourselves:
either exactly the configured addresses, or aioice's list plus 127.0.0.1.

The page gets the same servers as the server's own peer (`GET /ice`), with
TURN credentials static or minted per request from a shared secret: the TURN
REST scheme coturn implements as `use-auth-secret` (the username is the expiry
time, the password an HMAC-SHA1 of it), so a credential a page saw expires.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from typing import Any

import aioice.ice
import aioice.turn
from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy
from aiortc.rtcicetransport import parse_stun_turn_uri

from agent.config import IceConfig

TURN_SCHEMES = ("turn:", "turns:")

_original = aioice.ice.get_host_addresses
_fixed: list[str] = []


def _host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    if _fixed:
        return [a for a in _fixed if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]
    found = _original(use_ipv4, use_ipv6)
    if use_ipv4 and "127.0.0.1" not in found:
        found.append("127.0.0.1")
    return found


def set_host_addresses(addresses: list[str]) -> None:
    """Process-wide, as aioice's own gathering is; empty restores the default."""
    _fixed[:] = list(addresses)
    aioice.ice.get_host_addresses = _host_addresses


def turn_rest_credentials(
    secret: str, ttl_s: int, user: str = "omni-agent", now: float | None = None
) -> tuple[str, str]:
    """A username and password valid for `ttl_s` under the TURN REST scheme (coturn's `use-auth-secret`)."""
    username = f"{int((time.time() if now is None else now) + ttl_s)}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode()


def ice_servers(ice: IceConfig, now: float | None = None) -> list[dict[str, Any]]:
    """The configured servers as WebRTC's RTCIceServer dictionaries: STUN as they are, TURN with credentials."""
    stun = [url for url in ice.servers if not url.startswith(TURN_SCHEMES)]
    turn = [url for url in ice.servers if url.startswith(TURN_SCHEMES)]
    servers: list[dict[str, Any]] = [{"urls": stun}] if stun else []
    if turn:
        username, credential = ice.username, ice.credential
        if ice.secret:
            username, credential = turn_rest_credentials(
                ice.secret, ice.credential_ttl_s, ice.username or "omni-agent", now
            )
        servers.append({"urls": turn, "username": username, "credential": credential})
    return servers


def page_ice(ice: IceConfig) -> dict[str, Any]:
    """What the page builds its peer with (`GET /ice`): its servers and whether it may use relayed candidates only."""
    return {"iceServers": ice_servers(ice), "iceTransportPolicy": "relay" if ice.relay_only else "all"}


def page_configuration(page: dict[str, Any]) -> RTCConfiguration:
    """What `page_ice` gave, as an aiortc configuration: a client built as the page is (`AgentClient.ice`). An
    explicit (possibly empty) list: None would make aiortc use a public STUN server."""
    servers = [RTCIceServer(s["urls"], s.get("username"), s.get("credential")) for s in page.get("iceServers", [])]
    policy = RTCIceTransportPolicy(page.get("iceTransportPolicy", "all"))
    return RTCConfiguration(iceServers=servers, iceTransportPolicy=policy)


def rtc_configuration(ice: IceConfig) -> RTCConfiguration:
    """The server's own peer: the servers and policy the page gets."""
    return page_configuration(page_ice(ice))


async def check_turn(ice: IceConfig, timeout_s: float = 5.0) -> dict[str, str | None]:
    """Each TURN server tried once with the credentials the peers get: None where it allocated a relay, else
    why not ("401 - Unauthorized", no answer). aioice drops a refused allocation without a word, and a peer
    without relayed candidates (relay-only, or behind a NAT) then cannot connect: the server says so at start."""
    found: dict[str, str | None] = {}
    for server in ice_servers(ice):
        for url in server["urls"]:
            if not url.startswith(TURN_SCHEMES):
                continue
            try:
                where = parse_stun_turn_uri(url)
                relay, _ = await asyncio.wait_for(
                    aioice.turn.create_turn_endpoint(
                        asyncio.DatagramProtocol,
                        (where["host"], where["port"]),
                        server.get("username"),
                        server.get("credential"),
                        ssl=where["scheme"] == "turns",
                        transport=where["transport"],
                    ),
                    timeout_s,
                )
                relay.close()
                found[url] = None
            except TimeoutError:
                found[url] = f"no answer within {timeout_s:.0f} s"
            except Exception as exc:  # a refusal (STUN error code), a malformed URL, an unreachable address
                found[url] = str(exc) or type(exc).__name__
    return found
