"""The signalling wire protocol (docs/architecture.md, README): client messages checked and typed.

Sans-I/O. Every way a message can be wrong maps to one error code; the
server sends it back as an `Error` (`{"type": "error", ...}`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.profiles import NAMES as PROFILES
from agent.wire.messages import Bye, ClientMessage, ClientMetrics, Error, Interrupt, Offer, Text

CLIENT_TYPES = ("offer", "text", "interrupt", "bye", "client_metrics")
KIND: dict[type, str] = {
    Offer: "offer",
    Text: "text",
    Interrupt: "interrupt",
    Bye: "bye",
    ClientMetrics: "client_metrics",
}
MAX_TEXT_CHARS = 2000


class ProtocolError(Exception):
    def __init__(self, code: str, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fatal = fatal  # the session cannot go on after this one

    def to_message(self) -> Error:
        return Error(self.code, self.message)


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int = 64 * 1024
    max_sdp_bytes: int = 32 * 1024
    max_m_lines: int = 4


def parse_message(raw: str | bytes, limits: Limits) -> ClientMessage:
    if isinstance(raw, bytes):
        raise ProtocolError("bad_request", "binary messages are not part of the protocol; send JSON text", True)
    if len(raw.encode("utf-8", "surrogatepass")) > limits.max_message_bytes:
        raise ProtocolError(
            "too_large", f"message of {len(raw)} characters exceeds {limits.max_message_bytes} bytes", True
        )
    try:
        msg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError("bad_request", f"malformed JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("bad_request", "a message must be a JSON object")
    kind = msg.get("type")
    if kind not in CLIENT_TYPES:
        raise ProtocolError("bad_request", f"unknown message type {kind!r}; expected one of {', '.join(CLIENT_TYPES)}")
    if kind == "offer":
        return check_offer(msg, limits)
    if kind == "text":
        text = msg.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ProtocolError("bad_request", "'text' needs a non-empty string field 'text'")
        if len(text) > MAX_TEXT_CHARS:
            raise ProtocolError("too_large", f"text longer than {MAX_TEXT_CHARS} characters")
        return Text(text)
    if kind == "client_metrics":
        v2v = msg.get("voice_to_voice_ms")
        usable = isinstance(v2v, int | float) and not isinstance(v2v, bool) and 0 <= v2v < 60_000
        return ClientMetrics(float(v2v) if usable else None)  # a figure that cannot be one is left out
    return Interrupt() if kind == "interrupt" else Bye()


def check_offer(msg: dict[str, Any], limits: Limits) -> Offer:
    sdp = msg.get("sdp")
    if not isinstance(sdp, str):
        raise ProtocolError("bad_sdp", "an offer needs a string field 'sdp'", True)
    if len(sdp) > limits.max_sdp_bytes:
        raise ProtocolError("too_large", f"SDP over {limits.max_sdp_bytes} bytes", True)
    profile = msg.get("profile", "default")
    if profile not in PROFILES:
        raise ProtocolError("bad_request", f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}", True)
    for key in ("source_lang", "target_lang"):
        if key in msg and not (isinstance(msg[key], str) and msg[key].isalpha() and 2 <= len(msg[key]) <= 3):
            raise ProtocolError("bad_request", f"{key} must be a language code like 'en' or 'es'", True)
    for key in ("text_only", "echo_cancelled"):
        if not isinstance(msg.get(key, False), bool):
            raise ProtocolError("bad_request", f"{key} must be true or false", True)
    lines = [ln.strip() for ln in sdp.splitlines() if ln.strip()]
    if not lines or lines[0] != "v=0" or not any(ln.startswith("o=") for ln in lines):
        raise ProtocolError("bad_sdp", "the offer is not SDP (it must start with 'v=0' and have an 'o=' line)", True)
    media = [ln for ln in lines if ln.startswith("m=")]
    if len(media) > limits.max_m_lines:
        raise ProtocolError("bad_sdp", f"{len(media)} media sections; at most {limits.max_m_lines}", True)
    if not any(ln.startswith("m=audio ") for ln in media):
        raise ProtocolError("bad_sdp", "the offer has no audio section: a microphone track is required", True)
    if not any(ln.startswith("a=candidate:") for ln in lines):
        raise ProtocolError(
            "bad_sdp",
            "the offer carries no ICE candidates; gather them all before sending (no trickle). With a relay-only "
            "policy (`/ice`), none means the TURN server refused the credentials or could not be reached",
            True,
        )
    token = msg.get("token")
    return Offer(
        sdp,
        msg.get("profile"),
        msg.get("source_lang"),
        msg.get("target_lang"),
        msg.get("text_only", False),
        msg.get("echo_cancelled", False),
        token if isinstance(token, str) else None,
    )


def with_inband_fec(sdp: str) -> str:
    """An answer that asks for Opus in-band FEC (`useinbandfec=1`, RFC 7587): a browser then adds to each
    packet a low-rate copy of the one before it once it sees loss, which the receiver rebuilds a lost packet
    from (media.jitter). aiortc writes no fmtp for Opus, so the line is added or extended here."""
    lines = sdp.split("\r\n")
    opus = {
        ln.split()[0].removeprefix("a=rtpmap:")
        for ln in lines
        if ln.lower().startswith("a=rtpmap:") and " opus/" in ln.lower()
    }
    out: list[str] = []
    for ln in lines:
        pt = ln.split()[0].removeprefix("a=fmtp:") if ln.startswith("a=fmtp:") else None
        if pt in opus:
            opus.discard(pt)
            if "useinbandfec" not in ln:
                ln += ";useinbandfec=1"
        out.append(ln)
    for pt in opus:  # no fmtp line yet: one after the rtpmap
        at = next(i for i, ln in enumerate(out) if ln.startswith(f"a=rtpmap:{pt} "))
        out.insert(at + 1, f"a=fmtp:{pt} useinbandfec=1")
    return "\r\n".join(out)
