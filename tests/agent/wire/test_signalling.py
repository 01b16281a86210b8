"""Each way a client message can be wrong maps to one error code, and says whether the session can go on; the
answer asks for Opus FEC."""

import json

import pytest

from agent.wire.messages import Bye, ClientMetrics, Interrupt, Offer, Text, to_wire
from agent.wire.signalling import MAX_TEXT_CHARS, Limits, ProtocolError, parse_message, with_inband_fec

SDP = "\r\n".join(
    [
        "v=0",
        "o=- 1 2 IN IP4 127.0.0.1",
        "s=-",
        "t=0 0",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111",
        "a=candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host",
        "m=video 9 UDP/TLS/RTP/SAVPF 96",
    ]
)
LIMITS = Limits()


def offer(**fields) -> str:
    return json.dumps({"type": "offer", "sdp": SDP, **fields})


def refused(raw, limits: Limits = LIMITS) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse_message(raw, limits)
    return caught.value


def test_well_formed_messages_come_out_typed():
    first = parse_message(offer(profile="in_car", token="t0k"), LIMITS)
    assert first == Offer(SDP, "in_car", token="t0k")
    translated = parse_message(offer(profile="translate", source_lang="en", target_lang="es"), LIMITS)
    assert isinstance(translated, Offer) and (translated.source_lang, translated.target_lang) == ("en", "es")
    assert parse_message(offer(echo_cancelled=True, text_only=True), LIMITS) == Offer(
        SDP, text_only=True, echo_cancelled=True
    )
    assert parse_message('{"type": "text", "text": "hi"}', LIMITS) == Text("hi")
    assert parse_message('{"type": "interrupt"}', LIMITS) == Interrupt()
    assert parse_message('{"type": "bye"}', LIMITS) == Bye()
    assert parse_message('{"type": "client_metrics", "voice_to_voice_ms": 640}', LIMITS) == ClientMetrics(640.0)
    for figure in ("-1", "1e9", "true", '"fast"'):  # what cannot be a figure is left out, the message kept
        raw = f'{{"type": "client_metrics", "voice_to_voice_ms": {figure}}}'
        assert parse_message(raw, LIMITS) == ClientMetrics(None), figure


@pytest.mark.parametrize(
    "raw,code,fatal",
    [
        ("{not json", "bad_request", False),
        ("[1, 2]", "bad_request", False),
        ('{"type": "dance"}', "bad_request", False),
        ('{"type": "text", "text": "   "}', "bad_request", False),
        (json.dumps({"type": "text", "text": "x" * (MAX_TEXT_CHARS + 1)}), "too_large", False),
        (b'{"type": "bye"}', "bad_request", True),
        (json.dumps({"type": "offer"}), "bad_sdp", True),
        (offer(profile="pirate"), "bad_request", True),
        (offer(target_lang="spanish!"), "bad_request", True),
        (offer(text_only="yes"), "bad_request", True),
        (json.dumps({"type": "offer", "sdp": "hello"}), "bad_sdp", True),
        (json.dumps({"type": "offer", "sdp": SDP.replace("m=audio", "m=text")}), "bad_sdp", True),
        (json.dumps({"type": "offer", "sdp": SDP.replace("a=candidate", "a=nothing")}), "bad_sdp", True),
        (json.dumps({"type": "offer", "sdp": SDP + "\r\n" + "\r\n".join(["m=video 9 X 96"] * 4)}), "bad_sdp", True),
    ],
)
def test_each_fault_has_its_code_and_says_whether_the_session_ends(raw, code, fatal):
    error = refused(raw)
    assert (error.code, error.fatal) == (code, fatal), error.message
    assert to_wire(error.to_message()) == {"type": "error", "code": code, "message": error.message}


def test_size_limits_are_the_configs():
    assert refused("x" * 101, Limits(max_message_bytes=100)).code == "too_large"
    assert refused(offer(), Limits(max_sdp_bytes=20)).code == "too_large"
    assert isinstance(parse_message(offer(), Limits(max_m_lines=2)), Offer)
    assert refused(offer(), Limits(max_m_lines=1)).code == "bad_sdp"


def test_the_answer_asks_for_opus_fec_and_leaves_other_codecs_alone():
    bare = "m=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
    assert with_inband_fec(bare) == (
        "m=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\na=rtpmap:111 opus/48000/2\r\na=fmtp:111 useinbandfec=1\r\n"
        "a=rtpmap:0 PCMU/8000\r\n"
    )
    with_fmtp = "a=rtpmap:96 opus/48000/2\r\na=fmtp:96 minptime=10\r\n"
    assert with_inband_fec(with_fmtp) == "a=rtpmap:96 opus/48000/2\r\na=fmtp:96 minptime=10;useinbandfec=1\r\n"
    assert with_inband_fec(with_inband_fec(with_fmtp)) == with_inband_fec(with_fmtp)
    assert with_inband_fec("a=rtpmap:8 PCMA/8000\r\n") == "a=rtpmap:8 PCMA/8000\r\n"
