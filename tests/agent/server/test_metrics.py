"""/metrics parses with the Prometheus text parser, and its counters move with a real session."""

import asyncio

import numpy as np

from agent.client import RATE, AgentClient, CameraTrack
from benchmarks.harness import make_config, media_flowing, running, scrape_metrics, ws_url
from tests.support import scrape_until


def tone(seconds=0.6):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.4 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


async def test_metrics_move_with_a_real_session():
    async with running(make_config("echo", "turn")) as server:
        before = await asyncio.to_thread(scrape_metrics, server.port)
        assert before[("omni_sessions_live", ())] == 0
        client = AgentClient(ws_url(server), video=CameraTrack(fps=10, size=(160, 120)))
        await client.connect()
        await media_flowing(client)
        start = len(client.messages)
        client.mic.play(tone())
        await client.wait_for(lambda m: m["type"] == "metrics", 10, start)
        await client.send({"type": "client_metrics", "voice_to_voice_ms": 640})
        voice = ("omni_turn_latency_seconds_count", (("stage", "voice_to_voice"),))
        during = await scrape_until(server.port, lambda m: m.get(voice) == 1)
        await client.close()
        after = await scrape_until(server.port, lambda m: m.get(("omni_sessions_live", ())) == 0)
    assert during[("omni_sessions_live", ())] == 1
    assert during[("omni_sessions_total", ())] == before[("omni_sessions_total", ())] + 1
    assert during[("omni_output_frames_total", ())] > 50
    assert during[("omni_aligner_events_total", (("event", "video_frames"),))] > 0
    assert during[("omni_event_loop_lag_seconds_count", ())] > 0
    # what the media transport drops is counted too (no packet comes late or garbled on loopback)
    transport = {k[1][0][1]: v for k, v in during.items() if k[0] == "omni_transport_events_total"}
    assert transport.keys() == {
        "audio_packets",
        "audio_late_packets",
        "audio_lost_packets",
        "audio_fec_recovered_packets",
        "audio_concealed_packets",
        "audio_waiting_packets",
        "audio_undecodable_packets",
        "srtp_undecryptable_packets",
        "video_frames_decoded",
        "video_frames_shed",
        "video_undecodable_frames",
        "output_late_resets",
    }
    assert transport["audio_late_packets"] == transport["audio_undecodable_packets"] == 0
    assert transport["audio_packets"] > 50 and transport["audio_lost_packets"] == 0
    assert ("omni_jitter_target_ms", ()) in during and ("omni_jitter_depth_packets", ()) in during
    assert transport["srtp_undecryptable_packets"] == transport["video_frames_shed"] == 0
    assert transport["video_undecodable_frames"] == 0 and transport["video_frames_decoded"] > 0
    # what the engine's outbox dropped for room is shown too (nothing here: the reply is pulled as it comes)
    engine = {k[1][0][1]: v for k, v in during.items() if k[0] == "omni_engine_events_total"}
    assert engine == {"outbox_dropped_frames": 0, "outbox_dropped_events": 0}
    # the camera is decoded in a process of its own, whose CPU is shown beside the server's
    assert during[("omni_video_decoding_process_cpu_seconds_total", ())] > 0
    assert during[("omni_output_samples_dropped_total", (("why", "silence_trimmed"),))] == 0  # turn mode: not live
    for stage in ("endpoint", "first_audio", "voice_to_voice"):
        assert during[("omni_turn_latency_seconds_count", (("stage", stage),))] == 1, stage
    assert during[("omni_turn_latency_seconds_sum", (("stage", "voice_to_voice"),))] == 0.64
    # the session ended: it is no longer live, and what it counted is kept
    assert after[("omni_sessions_live", ())] == 0
    assert after[("omni_output_frames_total", ())] >= during[("omni_output_frames_total", ())]
    assert after[("omni_overload_level", ())] == 0
    # labels stay bounded: no session ids anywhere
    assert not any(client.answer["session"] in str(k) for k in after)
