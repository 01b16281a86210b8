"""A `/v1/realtime` connection is a session like a `/ws` one: the same admission, limits, shutdown, overload,
turn deadline, transcripts and turn metrics (the echo engine in turn mode: no model needed)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from agent.client import AgentClient
from agent.server.overload import Level
from benchmarks.harness import make_config, running, wait_until, ws_url
from tests.support import RealtimeClient, SlowEcho, burst_24k, scrape_until

FIRST_AUDIO = ("omni_turn_latency_seconds_count", (("stage", "first_audio"),))


def done(e: dict) -> bool:
    return e["type"] == "response.done"


async def test_a_realtime_turn_is_listed_measured_and_recorded(tmp_path):
    async with running(make_config("echo", "turn", transcripts_dir=str(tmp_path))) as server:
        async with RealtimeClient(server) as rc:
            await rc.wait_for(lambda e: e["type"] == "session.created", 10)
            assert server.realtime_live == 1 and len(server.sessions) == 1
            url = f"http://127.0.0.1:{server.port}/healthz"
            health = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read()))
            assert health["sessions"] == 1
            await rc.speak(burst_24k())
            end = await rc.wait_for(done, 15)
            assert end["response"]["status"] == "completed"
            kinds = rc.kinds()
            heard = kinds.index("conversation.item.input_audio_transcription.completed")
            assert heard < kinds.index("response.created") < kinds.index("response.output_audio.delta")
            assert kinds.index("response.output_audio.done") < kinds.index("response.done")
            metrics = await scrape_until(server.port, lambda m: m.get(FIRST_AUDIO, 0) >= 1, 10)
            assert metrics.get(FIRST_AUDIO, 0) == 1  # the turn's figures reached /metrics
            assert metrics[("omni_sessions_live", ())] == 1
        assert await wait_until(lambda: not server.sessions, 10)
    (path,) = tmp_path.glob("*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [(r["type"], r.get("role")) for r in records]
    assert kinds[0] == ("session", None) and kinds[-1] == ("end", None)
    assert ("transcript", "user") in kinds and ("transcript", "assistant") in kinds and ("metrics", None) in kinds


async def test_overload_reaches_realtime_sessions():
    async with running(make_config("echo", "turn")) as server:
        async with RealtimeClient(server) as rc:
            await rc.wait_for(lambda e: e["type"] == "session.created", 10)
            server.overload.level = Level.TEXT_ONLY
            server._apply_overload(Level.TEXT_ONLY)
            (conn,) = server.sessions.values()
            assert conn.pump.engine.text_only and conn.pump.queue.shed_video
            await rc.speak(burst_24k())
            await rc.wait_for(done, 15)
            kinds = rc.kinds()
            assert "response.output_audio_transcript.delta" in kinds  # answered in text
            assert "response.output_audio.delta" not in kinds  # and only in text
            server.overload.level = Level.REFUSE
            async with RealtimeClient(server) as refused:
                err = await refused.wait_for(lambda e: e["type"] == "error", 10)
                assert err["error"]["code"] == "busy" and "overloaded" in err["error"]["message"]
        metrics = server.metrics.render().decode()
    assert 'omni_sessions_refused_total{reason="overload"} 1.0' in metrics


async def test_a_hung_realtime_turn_is_cut_at_the_deadline_and_the_session_goes_on():
    cfg = make_config("echo", "turn")
    cfg.engine.end_silence_ms = 320
    cfg.media.turn_deadline_s = 1.0
    engine = SlowEcho("turn", end_silence_ms=320)
    engine.delay = 3600  # hangs before the first speech frame
    async with running(cfg, engine) as server:
        async with RealtimeClient(server) as rc:
            await rc.speak(burst_24k())
            err = await rc.wait_for(lambda e: e["type"] == "error", 10)
            assert err["error"]["code"] == "engine" and "no answer within 1" in err["error"]["message"]
            cut = await rc.wait_for(done, 5)
            assert cut["response"]["status"] == "cancelled"
            engine.delay = 0
            start = len(rc.events)
            await rc.speak(burst_24k())
            again = await rc.wait_for(done, 15, start)
            assert again["response"]["status"] == "completed" and "response.output_audio.delta" in rc.kinds(start)


async def test_shutdown_and_the_session_limit_hold_for_both_ways_in():
    async with running(make_config("echo", "turn", max_sessions=1)) as server:
        ws_client = AgentClient(ws_url(server))
        await ws_client.connect()
        async with RealtimeClient(server) as over:  # /ws holds the only place
            err = await over.wait_for(lambda e: e["type"] == "error", 10)
            assert err["error"]["code"] == "busy" and "limit of 1" in err["error"]["message"]
        await wait_until(lambda: over.ws.close_code is not None, 5)
        assert over.ws.close_code == 1013
        await ws_client.close()
        assert await wait_until(lambda: not server.sessions, 10)
        async with RealtimeClient(server) as rc:
            await rc.wait_for(lambda e: e["type"] == "session.created", 10)
            late = AgentClient(ws_url(server))  # now /v1/realtime holds it
            try:
                await late.connect()
                raise AssertionError("a /ws offer was admitted over the limit")
            except RuntimeError as exc:
                assert "limit of 1" in str(exc)
            await late.close()
            server.config.server.max_sessions = 8
            shutting = asyncio.create_task(server.shutdown(5.0))
            notice = await rc.wait_for(lambda e: e["type"] == "error", 10)
            assert notice["error"]["code"] == "busy" and "shutting down" in notice["error"]["message"]
        await asyncio.wait_for(shutting, 4)  # the session left: shutdown did not wait out its 5 s grace
        metrics = server.metrics.render().decode()
    assert 'omni_sessions_refused_total{reason="limit"} 2.0' in metrics


async def test_realtime_sessions_end_at_the_session_time_limit():
    async with running(make_config("echo", "turn", max_session_s=1.0)) as server:
        async with RealtimeClient(server) as rc:
            err = await rc.wait_for(lambda e: e["type"] == "error", 10)
            assert err["error"]["code"] == "timeout" and "at most 1 s" in err["error"]["message"]
            assert await wait_until(lambda: rc.ws.close_code is not None, 10)
        assert await wait_until(lambda: not server.sessions, 10)
