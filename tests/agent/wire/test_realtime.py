"""The Realtime protocol codec, sans-I/O: client events read, session messages written as server events."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from agent.wire import realtime as rt
from agent.wire.messages import Error, Metrics, State, Transcript


def test_pcm16_round_trip_and_bad_audio():
    pcm = np.array([0.0, 0.5, -0.5, 1.0], np.float32)
    back = rt.decode_pcm16(rt.encode_pcm16(pcm))
    assert back.dtype == np.dtype("<i2") and back.tolist() == [0, 16384, -16384, 32767]
    for bad, why in ((b"x", "base64 string"), ("%%%", "not base64"), (base64.b64encode(b"abc").decode(), "even")):
        with pytest.raises(rt.RealtimeError, match=why) as err:
            rt.decode_pcm16(bad)
        assert err.value.code == "invalid_audio"


def test_client_events_are_read_into_actions():
    audio = rt.parse_client_event(rt.append_audio(np.zeros(480, np.float32)))
    assert isinstance(audio, rt.AudioIn) and audio.pcm.size == 480
    assert rt.parse_client_event(rt.user_text("hello")) == rt.TextIn("hello")
    assert isinstance(rt.parse_client_event(rt.RESPONSE_CANCEL), rt.Cancel)
    assert isinstance(rt.parse_client_event(rt.RESPONSE_CREATE), rt.Ignore)
    assert rt.parse_client_event({"type": "input_audio_buffer.commit"}) == rt.Ack("input_audio_buffer.committed")
    update = rt.session_update(rt.session_object(16_000))
    assert rt.parse_client_event(update) == rt.SetRate(16_000)
    assert rt.parse_client_event({"type": "session.update", "session": "odd"}) == rt.SetRate(None)
    with pytest.raises(rt.RealtimeError, match="unknown event type") as err:
        rt.parse_client_event({"type": "mystery"})
    assert err.value.code == "unknown_event"
    with pytest.raises(rt.RealtimeError) as err:
        rt.parse_client_event({"type": "conversation.item.create", "item": {"content": [{"type": "input_audio"}]}})
    assert err.value.code == "invalid_item"
    for raw in (b"{}", "not json", "[1]", '{"type": 3}'):
        with pytest.raises(rt.RealtimeError) as err:
            rt.parse_event(raw)
        assert err.value.code == "invalid_event"


def test_session_objects_name_their_rates():
    offered = rt.session_object(24_000, offer_rates=True)
    assert rt.input_rate(offered) == 24_000 and rt.offered_rates(offered) == [16_000, 24_000]
    assert rt.input_rate({"audio": {"input": {"format": "pcm"}}}) is None and rt.offered_rates(None) == []


def test_a_reply_becomes_one_response():
    w = rt.ResponseWriter()
    heard = w.message(Transcript("user", "what time", True, 1))
    assert [e["type"] for e in heard] == [
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
    ]
    assert heard[2]["transcript"] == "what time"
    assert w.message(State("thinking")) == []
    first = w.message(Transcript("assistant", "It's", False, 1))
    assert [e["type"] for e in first] == ["response.created", "response.output_audio_transcript.delta"]
    more = w.message(Transcript("assistant", "It's noon.", False, 1))
    assert [e["delta"] for e in more] == [" noon."]  # cumulative text becomes deltas
    assert w.message(Transcript("assistant", "It's noon.", True, 1)) == []
    (audio,) = w.audio(np.zeros(960, np.int16))
    assert audio["type"] == "response.output_audio.delta" and audio["response_id"] == first[0]["response"]["id"]
    assert w.message(Metrics(1, {"interrupted": False})) == []
    end = w.message(State("listening"))
    assert [e["type"] for e in end] == [
        "response.output_audio_transcript.done",
        "response.output_audio.done",
        "response.done",
    ]
    assert end[0]["transcript"] == "It's noon." and end[2]["response"]["status"] == "completed"
    assert w.message(State("listening")) == []  # nothing open, nothing to close


def test_an_interrupted_reply_is_cancelled_and_errors_say_whose_fault():
    w = rt.ResponseWriter()
    w.audio(np.zeros(960, np.int16))
    w.message(Metrics(1, {"interrupted": True}))
    assert w.message(State("listening"))[-1]["response"]["status"] == "cancelled"
    (mine,) = w.message(Error("invalid_audio", "x", "e1"))
    (theirs,) = w.message(Error("engine", "y"))
    assert mine["error"] == {"type": "invalid_request_error", "code": "invalid_audio", "message": "x", "event_id": "e1"}
    assert theirs["error"]["type"] == "server_error"
