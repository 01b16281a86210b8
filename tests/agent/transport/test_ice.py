"""ICE servers for both peers: TURN credentials static or minted from a shared secret (the TURN REST scheme,
coturn's use-auth-secret), the relay-only policy, and secrets kept out of what is printed."""

from __future__ import annotations

import base64
import hashlib
import hmac

from aiortc import RTCIceTransportPolicy

from agent.config import IceConfig
from agent.transport.ice import ice_servers, page_configuration, page_ice, rtc_configuration, turn_rest_credentials

URLS = ["stun:stun.example.org:3478", "turn:turn.example.org:3478?transport=udp", "turns:turn.example.org:5349"]


def test_turn_rest_credentials_are_the_expiry_and_its_hmac_under_the_shared_secret():
    username, password = turn_rest_credentials("s3cret", 3600, "alice", now=1_000_000.5)
    assert username == "1003600:alice"
    expected = hmac.new(b"s3cret", b"1003600:alice", hashlib.sha1).digest()  # RFC draft-uberti-behave-turn-rest
    assert base64.b64decode(password) == expected


def test_stun_as_it_is_turn_with_its_credentials_static_or_minted():
    static = IceConfig(servers=URLS, username="u", credential="p")
    assert ice_servers(static) == [
        {"urls": URLS[:1]},
        {"urls": URLS[1:], "username": "u", "credential": "p"},
    ]
    minted = IceConfig(servers=URLS, secret="s3cret", credential_ttl_s=60)
    (_, turn) = ice_servers(minted, now=100.0)
    assert (turn["username"], turn["credential"]) == turn_rest_credentials("s3cret", 60, now=100)
    assert turn["username"] == "160:omni-agent"
    assert ice_servers(IceConfig()) == []  # no server at all: no public STUN either


def test_both_peers_get_the_same_servers_and_policy():
    relay = IceConfig(servers=URLS, username="u", credential="p", relay_only=True)
    page = page_ice(relay)
    assert page["iceTransportPolicy"] == "relay" and page["iceServers"] == ice_servers(relay)
    for configuration in (rtc_configuration(relay), page_configuration(page)):  # the server's, a client's
        assert configuration.iceTransportPolicy is RTCIceTransportPolicy.RELAY
        assert [(s.urls, s.username, s.credential) for s in configuration.iceServers] == [
            (URLS[:1], None, None),
            (URLS[1:], "u", "p"),
        ]
    assert rtc_configuration(IceConfig()).iceTransportPolicy is RTCIceTransportPolicy.ALL


def test_credentials_come_from_the_environment_and_never_show_in_a_printed_config(monkeypatch):
    monkeypatch.setenv("OMNI_TURN_SECRET", "from-the-env")
    monkeypatch.setenv("OMNI_TURN_CREDENTIAL", "a-password")
    ice = IceConfig(servers=URLS).with_environment()
    assert (ice.secret, ice.credential) == ("from-the-env", "a-password")
    assert IceConfig(servers=URLS, secret="in-the-file").with_environment().secret == "in-the-file"
    shown = repr(ice) + str(ice)
    assert "from-the-env" not in shown and "a-password" not in shown and "(hidden)" in shown
