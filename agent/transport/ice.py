"""ICE settings that aiortc does not expose: host candidates and STUN/TURN.

aioice gathers host candidates from every interface except loopback, so on a
machine whose only interface is loopback (a container, `unshare -n`) it
offers nothing and no peer can connect. We choose the list ourselves:
either exactly the configured addresses, or aioice's list plus 127.0.0.1.
"""

from __future__ import annotations

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

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


def rtc_configuration(servers: list[str]) -> RTCConfiguration:
    # An explicit (possibly empty) list: None would make aiortc use a public STUN server.
    return RTCConfiguration(iceServers=[RTCIceServer(urls=s) for s in servers])
