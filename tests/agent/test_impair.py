"""The network impairer: a seeded schedule of drops, delays and copies; the relay takes the server's place in
its answer."""

import pytest

from agent.impair import Impairer, ImpairingRelay, Impairment, is_media

ANSWER = (
    "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 127.0.0.1\r\n"
    "a=candidate:1 1 udp 2130706431 127.0.0.1 40123 typ host\r\na=rtpmap:96 opus/48000/2\r\n"
)


def test_the_impairer_drops_delays_and_copies_as_seeded():
    imp = Impairment(jitter_ms=40, loss=0.1, duplicate=0.05, seed=3)
    first, again = Impairer(imp), Impairer(imp)
    times = [first.deliveries(k * 0.02) for k in range(5000)]
    assert times == [again.deliveries(k * 0.02) for k in range(5000)]  # the same seed, the same network
    s = first.stats
    assert s.packets == 5000 and 430 < s.dropped < 570 and 180 < s.duplicated < 270
    delays = [t - k * 0.02 for k, ts in enumerate(times) for t in ts]
    assert 0 <= min(delays) and max(delays) <= 0.04 and 0.018 < sum(delays) / len(delays) < 0.022
    order = [k for t, k in sorted((ts[0], k) for k, ts in enumerate(times) if ts)]
    overtaken = sum(a > b for a, b in zip(order, order[1:], strict=False))
    assert overtaken > 200  # 40 ms of jitter on 20 ms packets reorders them
    assert Impairer(Impairment()).deliveries(1.0) == [1.0]


def test_only_rtp_and_rtcp_are_impaired():
    assert is_media(bytes([0x80, 111])) and is_media(bytes([0x81, 200]))
    assert not is_media(b"\x00\x01") and not is_media(bytes([22, 254, 253])) and not is_media(b"")


async def test_the_relay_takes_the_servers_one_candidate_and_refuses_more():
    relay = ImpairingRelay(Impairment())
    routed = await relay.route(ANSWER)
    assert "127.0.0.1 40123" not in routed and "a=candidate:1 1 udp 2130706431 127.0.0.1 " in routed
    relay.close()
    two = ANSWER + "a=candidate:2 1 udp 2130706431 10.0.0.5 40123 typ host\r\n"
    with pytest.raises(ValueError, match="one candidate"):
        await ImpairingRelay(Impairment()).route(two)
