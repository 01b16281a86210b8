"""Inbound audio over a jittery, lossy line: the impairing relay (agent/impair.py) between a real aiortc client
and the server on loopback. With the adaptive jitter buffer every packet that came is used, in order, and every
lost one is made up; without it about one in eight comes after a later one and is dropped. From a sender that
adds FEC (as a browser does once the receiver asks for it and it sees loss), lost packets are rebuilt from it."""

import asyncio

import numpy as np

from agent.client import AgentClient
from agent.impair import ImpairingRelay, Impairment
from agent.replay import ReplayMicrophone, encode_opus, silence_packet
from benchmarks.harness import make_config, media_flowing, running, scrape_metrics, wait_until, ws_url

LINE = Impairment(jitter_ms=40, loss=0.03, seed=11)


def voice(seconds: float) -> np.ndarray:
    t = np.arange(int(48_000 * seconds)) / 48_000
    return (0.3 * np.sin(2 * np.pi * (150 + 60 * t) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


async def over_the_line(jitter_buffer: str, packets: int = 300, fec: bool = False) -> tuple[dict, ImpairingRelay]:
    cfg = make_config("echo", "stream")
    cfg.media.jitter_buffer = jitter_buffer
    # encoded before the call: encoding 6 s on the loop would stall it, and a stall reads as jitter
    clip = encode_opus(voice(packets / 50 + 0.5), fec_loss_pct=10) if fec else voice(packets / 50 + 0.5)
    async with running(cfg) as server:
        mic = ReplayMicrophone(silence_packet()) if fec else None
        client = AgentClient(ws_url(server), mic=mic)
        client.relay = relay = ImpairingRelay(LINE)
        await client.connect()
        await media_flowing(client)
        conn = next(iter(server.sessions.values()))

        def counted() -> dict[str, float]:
            return {k.removeprefix("transport_audio_"): v for k, v in conn.pump.counters().items()}

        before = counted()  # what came before the voice (silence, which carries no FEC) is not judged
        client.mic.play(clip)
        assert await wait_until(lambda: counted()["packets"] >= before["packets"] + packets, 30)
        counters = {k: v - before[k] for k, v in counted().items()}
        metrics = await asyncio.to_thread(scrape_metrics, server.port)
        await client.close()
    if jitter_buffer == "adaptive":  # the buffer's state and what it made up, in /metrics
        assert ("omni_jitter_target_ms", ()) in metrics and ("omni_jitter_depth_packets", ()) in metrics
        assert metrics[("omni_transport_events_total", (("event", "audio_lost_packets"),))] >= counters["lost_packets"]
    print(jitter_buffer, {k: v for k, v in counters.items() if k.endswith("packets")}, relay.stats)
    return counters, relay


async def test_over_a_jittery_line_every_packet_is_used_in_order_and_the_lost_made_up():
    got, relay = await over_the_line("adaptive")
    assert relay.stats.dropped > 0
    # client and server share this process: a stall of it reads as jitter the window had not seen, so a few
    # packets may still come late on a slow, busy machine; the old path loses one in eight however fast it is
    assert got["late_packets"] <= 0.03 * got["packets"]
    assert got["lost_packets"] >= 3
    assert got["concealed_packets"] + got["fec_recovered_packets"] == got["lost_packets"]
    assert got["waiting_packets"] > 0.05 * got["packets"]  # packets overtaken: the next ones waited for them

    without, _ = await over_the_line("off")
    assert without["late_packets"] > 0.05 * without["packets"]  # dropped as late: the aligner fills them silent


async def test_lost_packets_are_rebuilt_from_the_fec_a_browser_adds():
    got, relay = await over_the_line("adaptive", fec=True)
    assert got["lost_packets"] >= 4
    assert got["fec_recovered_packets"] >= 0.75 * got["lost_packets"]
