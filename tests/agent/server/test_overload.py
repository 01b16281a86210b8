from agent.server.overload import OverloadConfig, OverloadPolicy


def test_steps_up_one_level_at_a_time_and_recovers_with_hysteresis():
    p = OverloadPolicy(OverloadConfig(first_audio_p95_ms=1000, escalate_s=1, recover_s=3, window_s=100))
    now = 0.0
    seen = []
    for _ in range(5):
        p.observe_first_audio(3000, now)  # pressure 3: past every level
    for _ in range(50):
        now += 0.25
        if (lvl := p.update(now)) is not None:
            seen.append((now, lvl))
    assert [lvl for _, lvl in seen] == [1, 2, 3]
    assert all(b - a >= 1 for (a, _), (b, _) in zip(seen, seen[1:], strict=False))
    # load falls: one step down per 3 s of calm (the slow turns age out of the window)
    p.config.window_s = 5
    for _ in range(5):
        p.observe_first_audio(200, now)
    down = []
    for _ in range(60):
        now += 0.25
        if (lvl := p.update(now)) is not None:
            down.append(lvl)
    assert down == [2, 1, 0] and p.level == 0 and p.transitions == 6


def test_between_thresholds_holds_level():
    p = OverloadPolicy(OverloadConfig(first_audio_p95_ms=1000, escalate_s=0, recover_s=0, window_s=100))
    for _ in range(3):
        p.observe_first_audio(1200, 0)  # pressure 1.2: shed video only
    levels = [p.update(t) for t in range(10)]
    assert p.level == 1 and [lvl for lvl in levels if lvl is not None] == [1]
    p.update(200)  # the old samples age out: pressure 0 for a moment, the trend starts
    for _ in range(3):
        p.observe_first_audio(800, 200)  # 0.8: above the 0.7 calm line: the level stays
    for t in range(200, 210):
        p.update(t)
    assert p.level == 1


def test_loop_lag_counts_too():
    p = OverloadPolicy(OverloadConfig(loop_lag_p95_ms=50, escalate_s=0))
    for _ in range(20):
        p.observe_loop_lag(80)
    p.update(0)
    p.update(1)
    assert p.level == 1 and p.name == "shed_video"


def test_old_samples_age_out():
    p = OverloadPolicy(OverloadConfig(first_audio_p95_ms=1000, escalate_s=0, recover_s=0, window_s=10))
    p.observe_first_audio(5000, 0)
    p.update(1)
    assert p.pressure() == 5
    p.update(20)
    assert p.pressure() == 0
