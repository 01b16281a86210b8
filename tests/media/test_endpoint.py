import numpy as np

from media.endpoint import EndpointConfig, EndpointEvent, EnergyEndpointer


def tone(level=0.2):
    return (level * np.sin(np.arange(1280) * 2 * np.pi * 300 / 16_000)).astype(np.float32)


def run(ep, ticks):
    return [(i, ev) for i, a in enumerate(ticks) if (ev := ep.update(i, a)) is not None]


def test_start_and_end():
    ep = EnergyEndpointer(EndpointConfig(end_silence_ms=400))
    quiet = np.zeros(1280, np.float32)
    ticks = [quiet] * 5 + [tone()] * 10 + [quiet] * 10
    events = run(ep, ticks)
    assert events == [(6, EndpointEvent.START), (19, EndpointEvent.END)]
    assert ep.start_tick == 5 and ep.last_voiced_tick == 14


def test_single_click_is_not_a_turn():
    ep = EnergyEndpointer()
    quiet = np.zeros(1280, np.float32)
    assert run(ep, [quiet, tone(), quiet, quiet]) == []


def test_steady_noise_does_not_hold_turn_open():
    rng = np.random.default_rng(1)
    noise = [(0.03 * rng.standard_normal(1280)).astype(np.float32) for _ in range(40)]
    ep = EnergyEndpointer()
    run(ep, noise)  # learn the floor
    loud = [n + tone(0.3) for n in noise[:8]]
    events = run(ep, noise[:5] + loud + noise[:10])
    assert [e for _, e in events] == [EndpointEvent.START, EndpointEvent.END]


def test_max_turn_length():
    ep = EnergyEndpointer(EndpointConfig(max_turn_ms=800))
    events = run(ep, [np.zeros(1280, np.float32)] + [tone()] * 20)
    assert [e for _, e in events][:2] == [EndpointEvent.START, EndpointEvent.END]
