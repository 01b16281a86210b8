"""`omni-agent bench`: voice-to-voice latency under load, measured at the client.

Starts a server (or targets one with --url), then for each level N runs N
concurrent aiortc clients. Each speaks a set of utterances (speech made
offline with the bundled hibari voice; clicks for the echo stream) with
audio and, optionally, a camera, and measures: voice-to-voice latency per
turn (last voiced sample sent to first reply sample received), underruns
and continuity of the returned audio, the server's CPU and memory, and the
clients' own CPU. Prints progress and a table, writes JSON and draws a PNG.

To measure the server rather than its clients: `--replay` sends media
encoded once before the run (`agent/replay.py`) instead of encoding per
client; `--server-cpus` / `--client-cpus` keep the two on separate cores; a
level where the server falls behind (a failed session, a lost turn, an
underrun, more of the camera frames shed undecoded than `--shed-limit-pct`,
p95 over `--p95-limit-ms`) ends a `--ramp`, and the level before it is
reported as the capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent.client import RATE, AgentClient, CameraTrack
from agent.machine import machine
from agent.replay import ReplayCamera, ReplayMicrophone, encode_camera_loop, encode_opus, silence_packet
from agent.transport.ice import set_host_addresses
from media.pcm import StreamResampler

UTTERANCES = ["What time is it?", "What can you do?", "Can you see me?", "Hello there.", "What did I say?"]


@dataclass
class Clip:
    text: str
    audio: np.ndarray  # 48 kHz mono float32
    last_voiced: int  # sample index
    packets: list[bytes] = field(default_factory=list)  # the audio as Opus packets, with --replay


@dataclass
class Replay:
    """What every replaying client sends, encoded once."""

    silence: bytes
    camera: list[bytes]

    @classmethod
    def encode(cls, clips: list[Clip]) -> Replay:
        for clip in clips:
            clip.packets = encode_opus(clip.audio)
        return cls(silence_packet(), encode_camera_loop())


def make_clips(click: bool, texts: list[str] = UTTERANCES) -> list[Clip]:
    """A click, or each of `texts` spoken by hibari at 48 kHz with 0.2 s of silence before and 0.1 s after."""
    if click:
        n = RATE // 100
        audio = (0.8 * np.sin(np.arange(n) * 2 * np.pi * 1000 / RATE)).astype(np.float32)
        return [Clip("click", audio, 0)]
    from agent.engines.cascade.models import Synthesizer

    tts = Synthesizer()
    clips = []
    for text in texts:
        speech = np.concatenate(list(tts.stream(text)))
        rs = StreamResampler(tts.rate, RATE, quality="HQ")
        audio = np.concatenate([rs.process(speech), rs.process(np.zeros(0, np.float32), last=True)])
        audio = np.concatenate([np.zeros(RATE // 5, np.float32), audio * 0.8, np.zeros(RATE // 10, np.float32)])
        clips.append(Clip(text, audio, int(np.flatnonzero(np.abs(audio) > 0.01)[-1])))
    return clips


class LoopStalls:
    """When the clients' own event loop stalled: a gap in the received audio that one of these covers was
    the clients' doing (packets waited in the socket), not the server's. Replaying clients need no watch:
    the kernel stamps their packets' arrival (`replay.MediaSocket`), which a stall does not move."""

    def __init__(self, period: float = 0.01, threshold: float = 0.02) -> None:
        self.period, self.threshold = period, threshold
        self.spans: list[tuple[float, float]] = []

    async def watch(self) -> None:
        while True:
            asleep = time.monotonic()
            await asyncio.sleep(self.period)
            now = time.monotonic()
            if now - asleep - self.period > self.threshold:
                self.spans.append((asleep + self.period, now))

    def cover(self, start: float, end: float) -> bool:
        return any(a < end and b > start for a, b in self.spans)


@dataclass
class ClientResult:
    latencies_ms: list[float] = field(default_factory=list)
    lost: int = 0
    underruns: int = 0  # gaps of more than 60 ms between received 20 ms frames
    stalled_gaps: int = 0  # ... that a stall of the clients' own loop covers: not counted as underruns
    continuity: float = 0.0  # audio received / wall time it spanned
    gaps: list[tuple[float, float]] = field(default_factory=list)  # each underrun: (when it began, seconds)


def make_client(url: str, video: bool, replay: Replay | None, text_only: bool = False) -> AgentClient:
    if replay is None:
        client = AgentClient(url, video=CameraTrack(fps=10, size=(640, 480)) if video else None)
    else:
        camera = ReplayCamera(replay.camera, fps=10) if video else None
        client = AgentClient(url, video=camera, mic=ReplayMicrophone(replay.silence))
    client.text_only = text_only
    return client


async def connect_client(url: str, video: bool, replay: Replay | None, text_only: bool = False) -> AgentClient:
    """A connected client whose media flows both ways: a turn spoken before that is no measure."""
    client = make_client(url, video, replay, text_only)
    try:
        await client.connect(timeout=20)
        for _ in range(400):
            if len(client.received.frames) >= 10:
                return client
            await asyncio.sleep(0.05)
        raise TimeoutError("no audio came back within 20 s of connecting")
    except BaseException:
        await client.close()
        raise


async def run_turns(
    client: AgentClient, clips: list[Clip], turns: int, offset: float, click: bool, stalls: LoopStalls
) -> ClientResult:
    """`turns` clips or questions, one after another; underruns count from the first, not from connecting. A
    text-only client times the first assistant transcript instead of the first audible reply."""
    result = ClientResult()
    await asyncio.sleep(0.5 + offset)  # the last sessions' set-up (handshakes, first key frames) settles
    first_frame = len(client.received.times)
    for i in range(turns):
        clip = clips[i % len(clips)]
        start = len(client.messages)
        ident = client.mic.play(clip.packets if isinstance(client.mic, ReplayMicrophone) else clip.audio)
        if click:
            await asyncio.sleep(0.5)
        else:
            try:
                await client.wait_for(lambda m: m["type"] == "metrics", 30, start)
            except TimeoutError:
                result.lost += 1
                continue
            await asyncio.sleep(0.3)
        t_end = client.mic.sent_at[ident] + clip.last_voiced / RATE
        if client.text_only:
            heard = next(
                (
                    at
                    for m, at in zip(client.messages[start:], client.message_times[start:], strict=True)
                    if m["type"] == "transcript" and m["role"] == "assistant"
                ),
                None,
            )
        else:
            heard = client.received.first_loud_after(t_end, threshold=0.1 if click else 0.02)
        if heard is None or heard - t_end < 0.01:  # nothing, or an earlier reply still playing
            result.lost += 1
        else:
            result.latencies_ms.append((heard - t_end) * 1000)
        if not click:
            await client.wait_for(lambda m: m.get("state") == "listening", 30, start)
            await asyncio.sleep(0.3)
    times = np.array(client.received.times[first_frame:])
    if times.size > 2:
        for i in np.flatnonzero(np.diff(times) > 0.06):
            if stalls.cover(times[i], times[i + 1]):
                result.stalled_gaps += 1
            else:
                result.underruns += 1
                result.gaps.append((float(times[i]), float(times[i + 1] - times[i])))
        result.continuity = float(times.size * 0.02 / (times[-1] - times[0] + 0.02))
    return result


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    a = np.array(values)
    return {f"p{q}": float(np.percentile(a, q)) for q in (50, 95, 99)}


LAG = "omni_event_loop_lag_seconds_bucket"
DECODING_CPU = "omni_video_decoding_process_cpu_seconds_total"  # the camera decoders' own process


def operator_get(url: str) -> bytes:
    """/metrics or /healthz, with the operator's token when OMNI_OPERATOR_TOKEN holds one."""
    request = urllib.request.Request(url)
    if token := os.environ.get("OMNI_OPERATOR_TOKEN"):
        request.add_header("Authorization", f"Bearer {token}")
    return urllib.request.urlopen(request, timeout=5).read()


def scrape_process(http: str) -> dict[str, float]:
    """The server's CPU seconds, resident memory, its event-loop lag histogram (`lag_le_<bound>` counts), the
    camera frames decoded and those shed undecoded (the decoders did not keep up)."""
    body = operator_get(f"{http}/metrics").decode()
    out = {}
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", DECODING_CPU):
        m = re.search(rf"^{name} (\S+)$", body, re.M)
        if m:
            out[name] = float(m.group(1))
    for bound, count in re.findall(rf'^{LAG}{{le="([^"]+)"}} (\S+)$', body, re.M):
        out[f"lag_le_{bound}"] = float(count)
    for event in ("video_frames_shed", "video_frames_decoded"):
        m = re.search(rf'^omni_transport_events_total{{event="{event}"}} (\S+)$', body, re.M)
        out[event] = float(m.group(1)) if m else 0.0
    return out


def lag_p95_ms(before: dict[str, float], after: dict[str, float]) -> float | None:
    """The upper bound of the bucket holding the 95th percentile of the loop lag sampled between two scrapes."""
    bounds = sorted((float(k.removeprefix("lag_le_")), k) for k in after if k.startswith("lag_le_"))
    counts = [(b, after[k] - before.get(k, 0.0)) for b, k in bounds]  # cumulative, +Inf last
    if not counts or counts[-1][1] <= 0:
        return None
    return next(b * 1000 for b, c in counts if c >= 0.95 * counts[-1][1])


def cpu_ticks() -> dict[str, tuple[int, int]]:
    """Per CPU: (ticks stolen by the hypervisor, all ticks), from /proc/stat; {} where there is none."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/stat").read_text().splitlines():
            name, *values = line.split()
            if name.startswith("cpu") and name != "cpu" and len(values) >= 8:
                ticks = [int(v) for v in values[:8]]
                out[name[3:]] = (ticks[7], sum(ticks))
    return out


def stolen_pct(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, float]:
    """The share of each CPU's time a virtual machine's host gave to others: a busy neighbour makes every
    figure of a level worse, so levels are only comparable with this beside them."""
    return {
        cpu: round(100 * (after[cpu][0] - before[cpu][0]) / max(1, after[cpu][1] - before[cpu][1]), 1)
        for cpu in before
        if cpu in after
    }


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_level(
    url: str,
    http: str,
    n: int,
    clips: list[Clip],
    turns: int,
    video: bool,
    click: bool,
    replay: Replay | None = None,
    text_only: bool = False,
) -> dict:
    # every session connects first (each DTLS handshake is a burst of CPU), then all take their turns:
    # what is measured is the steady state of n sessions, not n connecting at once
    set_up_at, before_set_up = time.monotonic(), scrape_process(http)
    connected = await asyncio.gather(
        *(connect_client(url, video, replay, text_only) for _ in range(n)), return_exceptions=True
    )
    set_up_s = time.monotonic() - set_up_at
    clients = [c for c in connected if isinstance(c, AgentClient)]
    before, t0, mine, ticks = scrape_process(http), time.monotonic(), own_cpu_seconds(), cpu_ticks()
    stalls = LoopStalls()
    watcher = asyncio.create_task(stalls.watch()) if replay is None else None
    try:
        results: list = await asyncio.gather(
            *(run_turns(c, clips, turns, i * 0.4 / max(1, n), click, stalls) for i, c in enumerate(clients)),
            return_exceptions=True,
        )
    finally:
        if watcher is not None:
            watcher.cancel()
        wall = time.monotonic() - t0
        clients_cpu = (own_cpu_seconds() - mine) / wall
        stolen = stolen_pct(ticks, cpu_ticks())
        after = scrape_process(http)
        inbound = [i for c in clients if (i := getattr(c.mic, "inbound", None)) is not None]
        sockets = [s for c in clients if (s := getattr(c.mic, "socket", None)) is not None]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    results += [c for c in connected if not isinstance(c, AgentClient)]
    ok = [r for r in results if isinstance(r, ClientResult)]
    failed = [repr(r) for r in results if not isinstance(r, ClientResult)]
    samples = [x for r in ok for x in r.latencies_ms]
    cpu = (after.get("process_cpu_seconds_total", 0) - before.get("process_cpu_seconds_total", 0)) / wall
    decoding_cpu = (after.get(DECODING_CPU, 0) - before.get(DECODING_CPU, 0)) / wall
    shed = after["video_frames_shed"] - before["video_frames_shed"]
    decoded = after["video_frames_decoded"] - before["video_frames_decoded"]
    return {
        "sessions": n,
        "turns": len(samples),
        "lost": sum(r.lost for r in ok),
        "failed_sessions": failed,
        "underruns": sum(r.underruns for r in ok),
        "gaps_while_clients_stalled": sum(r.stalled_gaps for r in ok),
        "clients_loop_stalls": len(stalls.spans) if watcher is not None else None,
        "continuity_min": min((r.continuity for r in ok), default=0.0),
        # (s into the level, gap ms, session): many sessions at one instant is the server stalling, one
        # session alone is its own stream
        "underrun_gaps": sorted(
            (round(at - t0, 3), round(1000 * gap), i) for i, r in enumerate(ok) for at, gap in r.gaps
        ),
        **{f"{k}_ms": v for k, v in percentiles(samples).items()},
        "server_cpu_pct": 100 * (cpu + decoding_cpu),
        "video_decoding_cpu_pct": 100 * decoding_cpu,  # of that, the decoders' process
        "set_up_s": set_up_s,
        "set_up_server_cpu_s": before.get("process_cpu_seconds_total", 0)
        - before_set_up.get("process_cpu_seconds_total", 0),
        "server_rss_mb": after.get("process_resident_memory_bytes", 0) / 2**20,
        "server_loop_lag_p95_ms": lag_p95_ms(before, after),
        "video_frames_decoded": decoded,
        "video_shed_pct": 100 * shed / max(1.0, shed + decoded),
        "cpu_stolen_pct": stolen,
        "client_cpu_pct_per_session": 100 * clients_cpu / n,
        "client_cpu_pct_of_cores": 100 * clients_cpu / len(os.sched_getaffinity(0)),
        "client_repeats_not_decoded_pct": 100
        * sum(i.repeats for i in inbound)
        / max(1, sum(i.packets for i in inbound)),
        "client_packets_not_sent": sum(s.send_dropped for s in sockets),  # the clients' socket buffers were full
        "client_key_frame_requests": sum(s.key_frame_requests for s in sockets),  # the server's PLIs
        "samples_ms": [round(x, 2) for x in samples],
    }


def behind(row: dict, p95_limit_ms: float, shed_limit_pct: float = 1.0) -> str | None:
    """Why the server fell behind at this level, or None: it held."""
    if row["failed_sessions"]:
        return f"{len(row['failed_sessions'])} session(s) failed"
    if row["lost"]:
        return f"{row['lost']} turn(s) lost"
    if row["underruns"]:
        return f"{row['underruns']} underrun(s)"
    if row["video_shed_pct"] > shed_limit_pct:
        return f"{row['video_shed_pct']:.1f} % of the camera frames shed undecoded"
    if row["p95_ms"] is None or row["p95_ms"] > p95_limit_ms:
        return f"p95 {row['p95_ms'] or float('nan'):.0f} ms over {p95_limit_ms:.0f} ms"
    return None


def cpu_list(text: str) -> set[int]:
    """'0', '0,2' or '0-3' as a set of CPU numbers this process may use."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"not a CPU list: {text!r} (e.g. 0, 0,2 or 0-3)") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise ValueError(f"CPUs {text!r}: this machine lets us use {sorted(allowed)}")
    return cpus


def spawn_server(
    *args: str, cpus: set[int] | None = None, cwd: Path | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`omni-agent serve ARGS` on a free loopback port, no transcripts, on `cpus` if given (every thread it
    starts inherits them), from the checkout `cwd` if given (another version's code, for a before-and-after);
    returns it and its http URL."""
    cmd = [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--host-address", "127.0.0.1"]
    cmd += ["--transcripts", "", "--log-level", "warning", *args]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=pin, cwd=cwd)
    assert proc.stdout is not None
    for _ in range(50):
        line = proc.stdout.readline()
        if m := re.search(r"open (http://[\d.:]+)/", line):
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("the server did not start")


def start_server(
    engine: str, mode: str | None, max_sessions: int, extra: list[str] | None = None, cpus: set[int] | None = None
) -> tuple[subprocess.Popen[str], str]:
    mode_args = ["--mode", mode] if mode else []
    return spawn_server("--engine", engine, "--max-sessions", str(max_sessions), *mode_args, *(extra or []), cpus=cpus)


def draw(rows: list[dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ns = [r["sessions"] for r in rows]
    for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
        ax1.plot(ns, [r[f"{q}_ms"] or np.nan for r in rows], style, label=q)
    ax1.set(xlabel="concurrent sessions", ylabel="voice-to-voice latency (ms)", title="Latency percentiles")
    ax1.set_xticks(ns)
    ax1.grid(alpha=0.3)
    ax1.legend()
    for r in rows:
        s = np.sort(r["samples_ms"])
        if s.size:
            ax2.plot(s, np.arange(1, s.size + 1) / s.size, label=f"{r['sessions']} sessions")
    ax2.set(xlabel="voice-to-voice latency (ms)", ylabel="fraction of turns", title="CDF")
    ax2.grid(alpha=0.3)
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="target a running server (http://host:port); default: start one here")
    p.add_argument(
        "--engine", default="echo", choices=["echo", "cascade", "qwen3-omni"], help="engine of the server started here"
    )
    p.add_argument("--model", help="with --engine qwen3-omni: the model folder")
    p.add_argument("--device", help="with --engine qwen3-omni: cuda or cpu")
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8], help="levels of concurrent sessions")
    p.add_argument("--ramp", help="levels as START:STOP:STEP instead of --sessions")
    p.add_argument("--turns", type=int, default=10, help="turns (utterances or clicks) per session")
    p.add_argument("--video", action="store_true", help="send a 640x480 10 fps camera too")
    p.add_argument("--replay", action="store_true", help="send media encoded once, not encoded per client")
    p.add_argument(
        "--text-only", action="store_true", help="sessions ask for replies in text: time the first reply text"
    )
    p.add_argument("--server-cpus", help="CPUs for the server started here, e.g. 0 or 0-1")
    p.add_argument("--client-cpus", help="CPUs for the clients (this process), e.g. 1")
    p.add_argument("--p95-limit-ms", type=float, default=300.0, help="a level whose p95 is over this has fallen behind")
    p.add_argument(
        "--shed-limit-pct",
        type=float,
        default=1.0,
        help="a level whose server shed more than this share of the camera frames undecoded has fallen behind",
    )
    p.add_argument("--out", type=Path, default=Path("results/bench"), help="prefix of the JSON and PNG written")


def run(args: argparse.Namespace) -> int:
    levels = args.sessions
    if args.ramp:
        a, b, c = (int(x) for x in args.ramp.split(":"))
        levels = list(range(a, b + 1, c))
    set_host_addresses(["127.0.0.1"])
    server_cpus = cpu_list(args.server_cpus) if args.server_cpus else None
    if args.client_cpus:
        os.sched_setaffinity(0, cpu_list(args.client_cpus))  # before any thread: the executor's inherit it
    proc = None
    if args.url:
        http = args.url.rstrip("/")
        info = json.loads(operator_get(f"{http}/healthz"))
        engine, mode = info["engine"], info.get("engine_mode")
    else:
        engine, mode = args.engine, ("stream" if args.engine == "echo" else None)
    click = engine == "echo" and mode == "stream"
    if click and args.text_only:
        print("bench: --text-only needs an engine that answers turns; the echo stream has none", file=sys.stderr)
        return 2
    if not args.url:
        print(f"bench: starting omni-agent serve --engine {engine} ...", flush=True)
        extra = [a for k in ("model", "device") if getattr(args, k) for a in (f"--{k}", getattr(args, k))]
        proc, http = start_server(engine, mode, max(levels), extra, server_cpus)
    url = http.replace("http", "ws", 1) + "/ws"
    what = "clicks" if click else "spoken questions"
    print(
        f"bench: {engine} at {http}; levels {levels}; {args.turns} {what} per session"
        f"{' with video' if args.video else ''}{', replayed' if args.replay else ''}"
        f"{', replies in text only' if args.text_only else ''}",
        flush=True,
    )
    clips = make_clips(click)
    replay = Replay.encode(clips) if args.replay else None
    rows: list[dict] = []
    capacity: dict = {"sessions": 0, "first_behind": None, "why": None}
    try:
        for n in levels:
            print(f"bench: {n} session(s) ...", flush=True)
            row = asyncio.run(run_level(url, http, n, clips, args.turns, args.video, click, replay, args.text_only))
            rows.append(row)
            p = {k: row[f"{k}_ms"] for k in ("p50", "p95", "p99")}
            shown = " ".join(f"{k} {v:.0f} ms" if v is not None else f"{k} -" for k, v in p.items())
            print(
                f"bench:   {n} sessions: {row['turns']} turns, {shown}, lost {row['lost']}, "
                f"underruns {row['underruns']} (+{row['gaps_while_clients_stalled']} while the clients stalled), "
                f"server CPU {row['server_cpu_pct']:.0f} %, "
                f"loop lag p95 <= {row['server_loop_lag_p95_ms'] or float('nan'):g} ms, "
                f"camera frames shed {row['video_shed_pct']:.1f} %, "
                f"clients' CPU {row['client_cpu_pct_per_session']:.2f} % a session, "
                f"stolen by the host {', '.join(f'cpu{k} {v:g} %' for k, v in row['cpu_stolen_pct'].items()) or '-'} "
                f"(all connected in {row['set_up_s']:.1f} s, {row['set_up_server_cpu_s']:.1f} s of server CPU)",
                flush=True,
            )
            if row["client_cpu_pct_of_cores"] > 80:
                print(
                    f"bench:   warning: the clients kept their {len(os.sched_getaffinity(0))} CPU(s) "
                    f"{row['client_cpu_pct_of_cores']:.0f} % busy: from here on the clients may be what falls behind",
                    flush=True,
                )
            why = behind(row, args.p95_limit_ms, args.shed_limit_pct)
            if why is None and capacity["first_behind"] is None:
                capacity["sessions"] = n
            elif why is not None and capacity["first_behind"] is None:
                capacity.update(first_behind=n, why=why)
                print(f"bench:   fell behind at {n} sessions: {why}", flush=True)
                if args.ramp:
                    break
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
    print(
        "\n| sessions | turns | p50 ms | p95 ms | p99 ms | lost | underruns | continuity | server CPU % | RSS MB "
        "| clients' CPU % a session |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = [f"{r[k]:.0f}" if r[k] is not None else "-" for k in ("p50_ms", "p95_ms", "p99_ms")]
        print(
            f"| {r['sessions']} | {r['turns']} | {' | '.join(f)} | {r['lost']} | {r['underruns']} "
            f"| {r['continuity_min']:.3f} | {r['server_cpu_pct']:.0f} | {r['server_rss_mb']:.0f} "
            f"| {r['client_cpu_pct_per_session']:.2f} |"
        )
    held = f"{capacity['sessions']} sessions held"
    if capacity["first_behind"] is not None:
        held += f"; fell behind at {capacity['first_behind']} ({capacity['why']})"
    print(f"bench: capacity: {held}")
    result = {
        "benchmark": "omni-agent bench",
        "engine": engine,
        "mode": mode,
        "video": args.video,
        "replay": args.replay,
        "server_cpus": sorted(server_cpus) if server_cpus else None,
        "client_cpus": args.client_cpus,
        "p95_limit_ms": args.p95_limit_ms,
        "shed_limit_pct": args.shed_limit_pct,
        "measure": "click round trip" if click else "voice to reply text" if args.text_only else "voice to voice",
        "text_only": args.text_only,
        "machine": machine(),
        "capacity": capacity,
        "levels": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out.with_suffix(".json"), args.out.with_suffix(".png")
    json_path.write_text(json.dumps(result, indent=2))
    draw(rows, f"omni-agent bench: {engine}{' + video' if args.video else ''} ({result['measure']})", png_path)
    print(f"bench: wrote {json_path} and {png_path}")
    return 0 if all(r["turns"] for r in rows) else 1
