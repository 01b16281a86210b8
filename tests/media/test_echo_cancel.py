"""EchoCanceller: WebRTC's AEC3 (the livekit wheel) fed as the session feeds it, on synthetic rooms.

The agent's speech is espeak-ng's; the room is a delay, a gain and a decaying reverb; the reference arrives
in 20 ms frames at 24 kHz and the microphone in 80 ms ticks at 16 kHz, as over WebRTC."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.harness import espeak_rendering, pink_noise
from media.echo_cancel import EchoCanceller
from media.pcm import StreamResampler

TICK = 1280  # 80 ms at 16 kHz
PULL = 480  # 20 ms at 24 kHz

SAID = [
    "It is ten past three in the afternoon, and the sun is still shining over the hills.",
    "You can ask me for the time or the date, or how many people I can see.",
    "The front left window is open halfway, and the cabin is set to twenty one degrees.",
]


@pytest.fixture(scope="module")
def agent_speech() -> np.ndarray:
    return np.concatenate([espeak_rendering(t, "en-us", 24_000) for t in SAID]).astype(np.float32)


def room(far24: np.ndarray, delay_ms: int, gain_db: float, seed: int = 0) -> np.ndarray:
    """What the microphone hears of `far24` (24 kHz) at 16 kHz: delayed, reverberant, with a little noise."""
    rs = StreamResampler(24_000, 16_000, quality="HQ")
    far16 = np.concatenate([rs.process(far24), rs.process(np.zeros(0, np.float32), last=True)])
    rng = np.random.default_rng(seed)
    ir = rng.standard_normal(16 * 150) * np.exp(-np.arange(16 * 150) / (16 * 40))
    ir[0] = 3.0
    ir /= np.sqrt(np.dot(ir, ir))
    wet = np.convolve(far16, ir)[: far16.size] * 10 ** (gain_db / 20)
    d = delay_ms * 16
    n = (far16.size + d + 16_000) // TICK * TICK
    mic = rng.standard_normal(n).astype(np.float32) * 3e-4
    mic[d : d + wet.size] += wet[: n - d]
    return mic


def run(
    aec: EchoCanceller, far24: np.ndarray, mic: np.ndarray, held: range = range(0), marks: list | None = None
) -> np.ndarray:
    """`held`: the ticks the user talked over a paused reply; `marks` gets each tick's `echo_only`."""
    played = np.zeros(mic.size * 3 // 2 + PULL * 4, np.float32)
    played[: far24.size] = far24[: played.size]
    out = np.zeros_like(mic)
    for i, t in enumerate(range(0, mic.size, TICK)):
        for k in range(4):  # four 20 ms frames leave, then the tick they overlap comes in
            start = t * 3 // 2 + k * PULL
            aec.played((np.clip(played[start : start + PULL], -1, 1) * 32767).astype(np.int16))
        out[t : t + TICK] = aec.clean(mic[t : t + TICK], talking=i in held)
        if marks is not None:
            marks.append(aec.echo_only)
    return out


def db(x: np.ndarray) -> float:
    return 10 * float(np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-12))


@pytest.mark.parametrize("delay_ms, gain_db", [(80, -6), (200, -6), (300, -15)])
def test_the_agents_voice_is_taken_out_of_what_the_microphone_heard(agent_speech, delay_ms, gain_db):
    mic = room(agent_speech, delay_ms, gain_db)
    aec = EchoCanceller()
    out = run(aec, agent_speech, mic)
    settled = slice(delay_ms * 16 + 2 * 16_000, delay_ms * 16 + agent_speech.size * 2 // 3)
    reduction = db(mic[settled]) - db(out[settled])
    print(f"{delay_ms} ms, {gain_db} dB: {reduction:.1f} dB less echo once settled; estimated {aec.delay_ms} ms")
    assert reduction >= 25, reduction
    assert aec.reduction_db is not None and aec.reduction_db >= 15  # the session's figure, convergence included
    assert aec.delay_ms is not None and abs(aec.delay_ms - delay_ms) <= 40  # the coarse estimate of the path


def test_the_users_voice_over_the_echo_comes_through(agent_speech):
    mic = room(agent_speech, 200, -6)
    user = espeak_rendering("What is the weather like in Paris tomorrow morning?", "en-gb", 16_000) * 0.5
    at = 4 * 16_000  # the user talks over the reply, once the canceller has settled
    mic[at : at + user.size] += user
    out = run(EchoCanceller(), agent_speech, mic)
    lag = 128  # AEC3 delays what it processes by 8 ms
    heard = out[at + lag : at + lag + user.size]
    kept = db(heard) - db(user)
    # the user's words are there: the two loudness contours (10 ms frames) follow each other (the suppressor's
    # gains change phases, so the waveforms themselves need not)
    n = user.size // 160 * 160
    a, b = (np.log10(np.square(x[:n]).reshape(-1, 160).mean(axis=1) + 1e-7) for x in (heard, user))
    corr = float(np.corrcoef(a, b)[0, 1])
    print(f"the user's voice {kept:+.1f} dB, {lag / 16:.1f} ms later, correlation {corr:.2f}")
    assert kept > -6  # double talk: the user's voice is not cancelled with the echo
    assert corr > 0.5, corr  # its residual echo and the double-talk suppression colour it


@pytest.mark.parametrize("gain_db", [None, -15])
def test_with_no_echo_path_the_users_voice_over_the_reply_is_not_taken_for_one(agent_speech, gain_db):
    """Headphones: AEC3 alone would silence the user over the reply for as long as it plays (it assumes an
    echo it has not found); once the estimator finds none, the microphone bypasses it. A weak echo is kept."""
    mic = room(agent_speech, 200, -120 if gain_db is None else gain_db)
    user = espeak_rendering("Okay.", "en-us", 16_000) * 0.3
    spans = [int(s * 16_000) for s in (8.0, 9.5)]  # the estimator has ruled out an echo by then
    for at in spans:
        mic[at : at + user.size] += user
    aec = EchoCanceller()
    out = run(aec, agent_speech, mic)
    kept = [db(out[at + 128 : at + 128 + user.size]) - db(user) for at in spans]
    print(f"echo {gain_db} dB: found {aec.echo_present}; 'okay' {kept} dB; {aec.stats.bypassed_frames} frames bypassed")
    assert aec.echo_present is (gain_db is not None)
    assert all(k > (-2 if gain_db is None else -6) for k in kept), kept  # a weak echo: some double-talk loss
    if gain_db is None:
        assert aec.stats.bypassed_frames > 0


def test_a_long_echo_path_is_held_back_into_the_cancellers_reach(agent_speech):
    far = np.concatenate([agent_speech, agent_speech])
    mic = room(far, 700, -6)
    aec = EchoCanceller()
    out = run(aec, far, mic)
    late = slice(mic.size - 6 * 16_000, mic.size - 16_000)
    reduction = db(mic[late]) - db(out[late])
    print(f"700 ms: estimated {aec.delay_ms} ms, reference held back {aec.holdback_frames * 10} ms, {reduction:.1f} dB")
    assert aec.delay_ms is not None and abs(aec.delay_ms - 700) <= 40
    assert abs(aec.holdback_frames * 10 - (aec.delay_ms - 200)) <= 60  # moved only by more than 60 ms
    assert reduction >= 20, reduction  # AEC3 alone finds delays up to about 400 ms: without it, near 0


def test_nothing_runs_while_nothing_plays_and_the_room_is_quiet_or_the_microphone_silent_but_in_a_car():
    aec = EchoCanceller()
    rng = np.random.default_rng(1)
    speech = espeak_rendering("Hello there, what time is it?", "en-us", 16_000)
    room = np.concatenate([rng.standard_normal(TICK * 10) * 1e-4, speech]).astype(np.float32)
    silence = np.zeros(PULL, np.int16)
    out = []
    for t in range(0, room.size - TICK + 1, TICK):
        for _ in range(4):
            aec.played(silence)
        out.append(aec.clean(room[t : t + TICK]))
    assert np.array_equal(np.concatenate(out), room[: len(out) * TICK])  # the user in a quiet room: untouched
    assert aec.stats.frames == 0 and aec._processor is None and aec._plain is None  # nothing was even made
    car = EchoCanceller()
    noise = (pink_noise(TICK * 40, 2) * 0.03).astype(np.float32)  # road noise at about -30 dBFS
    for t in range(0, noise.size, TICK):
        for _ in range(4):
            car.played(silence)
        car.clean(noise[t : t + TICK])
    print(f"noise floor {car.noise_floor_dbfs:.1f} dBFS; {car.stats.suppressed_frames} frames suppressed")
    assert car.stats.suppressed_frames > 0 and car._processor is None  # the suppressor, and no canceller
    listening = EchoCanceller()  # a client that sends silence while the reply plays (what bench --replay sends)
    reply = espeak_rendering("It is ten past three in the afternoon.", "en-us", 24_000)
    run(listening, reply, np.zeros(reply.size * 2 // 3 // TICK * TICK + 16_000, np.float32))
    assert 0 < listening.stats.frames <= 1500 // 10  # until an echo would have come back, no longer


def test_a_user_who_speaks_once_the_reply_has_ended_is_heard_as_they_spoke(agent_speech):
    """AEC3's suppressor takes a voice just after the echo for echo: here "Turn on the seat heating" 800 ms after
    a reply came out as "Hernandez eat heating", and over the real transport (the in-car test) as "Ernoff the
    seat-keeping"."""
    reply = agent_speech[: 24_000 * 3]
    user = espeak_rendering("Turn on the seat heating for the driver.", "en-us", 16_000).astype(np.float32)
    end = reply.size * 2 // 3
    # a client that sent silence while the reply played: no echo path, so nothing touches the user, however soon
    start = (end + 300 * 16) // TICK * TICK
    mic = np.zeros(start + user.size // TICK * TICK + TICK, np.float32)
    mic[start : start + user.size // TICK * TICK] = user[: user.size // TICK * TICK]
    listening, marks = EchoCanceller(), []
    out = run(listening, reply, mic, marks=marks)
    assert np.array_equal(out[start:], mic[start:]) and not any(marks)
    # a room that echoes: once the echo has died away (its delay, then the room's ringing) the user passes as heard;
    # three seconds in, the delay is not estimated yet, so the longest AEC3 finds itself stands for it
    aec, marks = EchoCanceller(), []
    roomy = room(reply, 200, -6)
    start = (end + (aec.config.max_aec_delay_ms + aec.config.reverb_ms + 80) * 16) // TICK * TICK
    roomy = np.concatenate([roomy, np.zeros(start + user.size // TICK * TICK + TICK - roomy.size, np.float32)])
    roomy[start : start + user.size] += user
    out = run(aec, reply, roomy, marks=marks)
    after = slice(start, roomy.size)
    assert np.abs(out[after] - roomy[after]).max() <= 1 / 32768 and not any(marks[start // TICK :])
    assert aec.stats.passed_frames > 0 and aec.reduction_db >= 15  # fed to AEC3 until then; the echo was cancelled


def test_the_reference_is_bounded_and_what_went_missing_is_counted():
    aec = EchoCanceller()
    frame = np.full(PULL, 1000, np.int16)
    for _ in range(500):  # 10 s played while the microphone sent nothing (a stalled client)
        aec.played(frame)
    assert len(aec._queue) <= 200 and aec.stats.reference_dropped > 0
    aec.clean(np.zeros(TICK, np.float32))
    assert len(aec._queue) <= 4  # a tick takes its share; what is left over beyond 40 ms goes
    for _ in range(3):
        aec.clean(np.zeros(TICK, np.float32))
    assert aec.stats.reference_padded >= 8  # ticks with nothing played to pair with: silence, counted


def test_ticks_of_the_agents_voice_alone_are_marked_as_no_ones_speech(agent_speech):
    """What AEC3 took most of out of (`gate_db`) was the agent's voice: VAD is told, so a leak of its suppressor
    (8-9 dB less echo over a tick, at -45 dBFS) is not speech over the reply. A voice over the echo mostly is not
    marked; the user alone, once the canceller has gone idle after the reply, never is."""
    echo = room(agent_speech, 200, -6)
    user = espeak_rendering("What is the weather like in Paris tomorrow morning?", "en-gb", 16_000) * 0.5
    near = np.zeros(echo.size + 4 * 16_000, np.float32)
    at, late = 4 * 16_000, echo.size + 16_000
    near[at : at + user.size] += user
    near[late : late + user.size] += user[: near.size - late]
    mic = near.copy()
    mic[: echo.size] += echo
    marks: list[bool] = []
    run(EchoCanceller(), agent_speech, mic, marks=marks)
    marked = np.array(marks)
    ticks = np.arange(marked.size) * TICK
    sounding = lambda x: np.array([np.mean(np.abs(x[t : t + TICK]) > 0.01) > 0.3 for t in ticks])  # noqa: E731
    talks, echoes = sounding(near), sounding(np.concatenate([echo, np.zeros(near.size - echo.size, np.float32)]))
    settled = (ticks > 2 * 16_000) & (ticks < agent_speech.size * 2 // 3)
    alone, over = marked[settled & echoes & ~talks], marked[talks & (ticks < late)]
    print(f"marked: the echo alone {alone.mean():.2f} of {alone.size} ticks, the user over it {over.mean():.2f}")
    assert alone.mean() >= 0.8
    assert over.mean() <= 0.4
    assert not marked[ticks >= late].any()


def test_while_the_reply_is_held_its_echo_is_cancelled_until_it_dies_away_then_the_microphone_passes(agent_speech):
    """Held: the framer plays silence, but what it played just before still comes back for the path's delay and
    the room's ringing; AEC3 (fed throughout, so it stays in step) takes that out, then the user's voice passes
    as it came (AEC3's suppressor would take part of it)."""
    pause, resume = 4 * 24_000, 6 * 24_000  # the reply is held from 4 s to 6 s of what played
    played = np.concatenate([agent_speech[:pause], np.zeros(resume - pause, np.float32), agent_speech[pause:]])
    mic = room(played, 200, -6)
    user = espeak_rendering("Wait, what was that about the window?", "en-gb", 16_000)[:26_000] * 0.3
    mic[4 * 16_000 + 4_800 : 4 * 16_000 + 4_800 + user.size] += user  # its voice goes on (what held the reply)
    held = range(4 * 16_000 // TICK, 6 * 16_000 // TICK)
    aec = EchoCanceller()
    out = run(aec, played, mic, held=held)
    tail = slice(4 * 16_000 + 1280, 4 * 16_000 + 200 * 16)  # the echo of what played before the pause
    clear = slice(4 * 16_000 + 600 * 16 + TICK, 6 * 16_000)  # 200 ms and a room's ringing later
    passed = aec.stats.passed_frames
    print(f"held: the echo's tail {db(mic[tail]) - db(out[tail]):.1f} dB less; then {passed} frames as they came")
    assert db(mic[tail]) - db(out[tail]) >= 15
    assert np.abs(out[clear] - mic[clear]).max() < 1 / 16_384  # passed (int16 rounding aside)
    after = slice(6 * 16_000 + 1280, 7 * 16_000)
    assert db(mic[after]) - db(out[after]) >= 15  # resumed: still cancelled, AEC3 in step


def test_a_voice_starting_in_the_echos_tail_is_kept_whole_in_what_the_linear_filter_left(agent_speech):
    """AEC3's suppressor takes a voice that starts while the echo of what played before the hold is still coming
    back for echo; speex's linear filter beside it (`heard`) cancels less but keeps the voice: what speech over
    a held reply is recognised from, once it has adapted. Where the tick passes as heard there is none."""
    hold_s = 9  # the reply is held 9 s into what played: speex has adapted (it takes seconds)
    played = np.concatenate([agent_speech[: hold_s * 24_000], np.zeros(3 * 24_000, np.float32)])
    mic = room(played, 200, -6)
    echo = mic.copy()
    user = espeak_rendering("Got it, thanks.", "en-gb", 16_000)[:12_000] * 0.3
    onset = hold_s * 16_000 + 160 * 16  # a voice 160 ms after the hold, with the echo's tail still coming
    mic[onset : onset + user.size] += user
    aec = EchoCanceller()
    played_pcm = np.zeros(mic.size * 3 // 2 + PULL * 4, np.float32)
    played_pcm[: played.size] = played[: played_pcm.size]
    out, heard, kinds, reductions = np.zeros_like(mic), np.zeros_like(mic), [], []
    held_from = hold_s * 16_000 // TICK  # the first tick of the hold (a position in the signal, not a clock)
    for i, t in enumerate(range(0, mic.size, TICK)):
        for k in range(4):
            start = t * 3 // 2 + k * PULL
            aec.played((np.clip(played_pcm[start : start + PULL], -1, 1) * 32767).astype(np.int16))
        out[t : t + TICK] = aec.clean(mic[t : t + TICK], talking=i >= held_from)
        kinds.append(aec.heard is not None)
        reductions.append(aec.linear_reduction_db)
        heard[t : t + TICK] = aec.heard if aec.heard is not None else out[t : t + TICK]
    settled = slice((hold_s - 2) * 16_000, hold_s * 16_000)  # the reply sounding, speex adapted
    linear_db = db(echo[settled]) - db(heard[settled])
    tail = slice(onset, hold_s * 16_000 + 200 * 16 + 300 * 16)  # the voice over the echo's tail
    n = (tail.stop - tail.start) // 160 * 160

    def contour(x: np.ndarray) -> np.ndarray:
        return np.log10(np.square(x[tail][:n]).reshape(-1, 160).mean(axis=1) + 1e-7)

    said = user[:n]
    voice = contour(np.concatenate([np.zeros(onset), said]))
    corr_linear = float(np.corrcoef(contour(heard), voice)[0, 1])
    corr_aec3 = float(np.corrcoef(contour(out), voice)[0, 1])
    kept_linear, kept_aec3 = db(heard[tail]) - db(said), db(out[tail]) - db(said)
    first = next(i for i, k in enumerate(kinds) if k)
    print(
        f"linear filter: {linear_db:.1f} dB less echo while the reply sounds; the voice over the tail "
        f"{kept_linear:+.1f} dB, contour correlation {corr_linear:.2f} (AEC3's output {kept_aec3:+.1f} dB, "
        f"{corr_aec3:.2f}); used from {first * 0.08:.2f} s, ticks with it {sum(kinds)} of {len(kinds)}"
    )
    assert linear_db >= 6  # it cancels, if less than AEC3
    assert abs(kept_linear) < 3 and corr_linear > 0.75  # the voice whole over the tail
    assert kinds[tail.start // TICK]
    # not before it has adapted: what it leaves in a session's first seconds is mostly echo
    assert first * TICK > 16_000 and reductions[first - 1] < aec.config.linear_min_db <= reductions[first]
    assert not kinds[-1]  # the echo died away: the microphone passes as heard, and is as good
