"""Prometheus metrics for one server process.

Labels are bounded (stage, kind, level): never a session id. Each session's
pump counts (aligner, rings, output) and says so through `counters()`; a
collector sums them at scrape time over live sessions plus the totals of
ended ones, so nothing is counted twice and nothing is lost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.session.pump import ALIGNER_COUNTERS, SessionPump
from agent.wire.messages import Metrics
from media.rtc.video_decoding import shared_process

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# Stages a turn's metrics message may carry (as `<stage>_ms`); voice to voice comes from the client.
TURN_STAGES = ("endpoint", "recognition_left", "first_text", "first_audio", "llm_first_token", "llm_first_sentence")


class ServerMetrics:
    def __init__(self, live: Callable[[], Iterable[SessionPump]]) -> None:
        self.registry = CollectorRegistry()
        self._live = live
        self._retired: dict[str, float] = {}
        r = self.registry
        ProcessCollector(registry=r)  # CPU seconds and resident memory, for bench and dashboards
        # and the camera decoders' process's (omni_video_decoding_process_*), while one runs
        ProcessCollector(namespace="omni_video_decoding", pid=lambda: shared_process().pid, registry=r)
        self.sessions_total = Counter("omni_sessions", "Sessions started", registry=r)
        self.sessions_refused = Counter("omni_sessions_refused", "Offers refused", ["reason"], registry=r)
        self.latency = Histogram(
            "omni_turn_latency_seconds", "Per-turn latency by stage", ["stage"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.loop_lag = Histogram(
            "omni_event_loop_lag_seconds",
            "How late the event loop woke a 100 ms timer",
            # fine below 50 ms: a server on one core falls behind at a lag p95 of 10-25 ms (docs/benchmarks.md)
            buckets=(0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=r,
        )
        self.engine_jobs = Histogram(
            "omni_engine_batch_size",
            "Engine work items run together (in flight at once)",
            buckets=(1, 2, 4, 8, 16, 32),
            registry=r,
        )
        self.overload_level = Gauge("omni_overload_level", "0 normal, 1 shed video, 2 text only, 3 refuse", registry=r)
        self.overload_transitions = Counter("omni_overload_transitions", "Overload level changes", registry=r)
        self.errors = Counter("omni_errors", "Error messages sent to clients", ["code"], registry=r)
        r.register(_SessionCollector(self))

    def retire(self, pump: SessionPump) -> None:
        """A session ended: keep its counts in the totals."""
        for k, v in pump.counters().items():
            self._retired[k] = self._retired.get(k, 0) + v

    def observe_turn(self, msg: Metrics) -> None:
        for stage in TURN_STAGES:
            value = msg.figures.get(f"{stage}_ms")
            if isinstance(value, int | float):
                self.latency.labels(stage).observe(value / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SessionCollector(Collector):
    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        live = list(self.metrics._live())
        totals = dict(self.metrics._retired)
        audio_depth = video_depth = 0
        for pump in live:
            for k, v in pump.counters().items():
                totals[k] = totals.get(k, 0) + v
            audio, video = pump.occupancy()
            audio_depth += audio
            video_depth += video
        yield GaugeMetricFamily("omni_sessions_live", "Sessions now", value=len(live))
        occupancy = GaugeMetricFamily("omni_ring_occupancy", "Items queued, summed over sessions", labels=["kind"])
        occupancy.add_metric(["audio"], audio_depth)
        occupancy.add_metric(["video"], video_depth)
        yield occupancy
        drops = CounterMetricFamily("omni_ring_drops", "Items dropped from the rings", labels=["kind"])
        drops.add_metric(["audio"], totals.get("ring_audio_dropped", 0))
        drops.add_metric(["video"], totals.get("ring_video_dropped", 0))
        drops.add_metric(["video_shed"], totals.get("ring_video_shed", 0))
        yield drops
        aligner = CounterMetricFamily("omni_aligner_events", "Aligner decisions", labels=["event"])
        for k in ALIGNER_COUNTERS:
            aligner.add_metric([k], totals.get(f"aligner_{k}", 0))
        yield aligner
        yield CounterMetricFamily(
            "omni_output_underruns", "20 ms output frames that ran short", value=totals.get("output_underruns", 0)
        )
        yield CounterMetricFamily(
            "omni_output_frames", "20 ms output frames sent", value=totals.get("output_frames", 0)
        )
        yield CounterMetricFamily(
            "omni_output_held_frames",
            "20 ms frames of silence while a reply was held for speech over it",
            value=totals.get("output_held_frames", 0),
        )
        for prefix, what in (("engine", "the engine"), ("transport", "the media transport")):
            family = CounterMetricFamily(f"omni_{prefix}_events", f"What {what} counted", labels=["event"])
            for k, v in sorted(totals.items()):
                if k.startswith(f"{prefix}_"):
                    family.add_metric([k.removeprefix(f"{prefix}_")], v)
            yield family
        yield from _echo_families(live, totals)
        gauges = [p.transport_gauges() for p in live]
        targets = [g["jitter_target_ms"] for g in gauges if "jitter_target_ms" in g]
        if targets:
            yield GaugeMetricFamily(
                "omni_jitter_target_ms",
                "How long the inbound audio's jitter buffer waits for a missing packet: the worst live session's",
                value=max(targets),
            )
            yield GaugeMetricFamily(
                "omni_jitter_depth_packets",
                "Inbound audio packets held for one missing before them, all live sessions",
                value=sum(g.get("jitter_depth", 0) for g in gauges),
            )
        speech_over = CounterMetricFamily(
            "omni_interruptions", "Speech over the agent's reply, held and judged", labels=["outcome"]
        )
        for outcome, key in (("held", "interruptions"), ("resumed", "interruptions_resumed")):
            speech_over.add_metric([outcome], totals.get(key, 0))
        speech_over.add_metric(["cancelled"], totals.get("interruptions_confirmed", 0))
        speech_over.add_metric(["continued"], totals.get("interruptions_continued", 0))
        speech_over.add_metric(["blip"], totals.get("interruptions_blips", 0))
        speech_over.add_metric(["early"], totals.get("interruptions_early", 0))  # held before its tick was whole
        speech_over.add_metric(["early_released"], totals.get("interruptions_early_released", 0))  # ... not voiced
        yield speech_over
        weighed = CounterMetricFamily(
            "omni_held_words_weighed",
            "Words heard over the reply weighed against the backchannel and stop sayings (passes): as heard, or "
            "taken for the likelier saying against them",
            labels=["verdict"],
        )
        backchannel, stop = totals.get("held_words_weighed_backchannel", 0), totals.get("held_words_weighed_stop", 0)
        weighed.add_metric(["as_heard"], totals.get("held_words_weighed", 0) - backchannel - stop)
        weighed.add_metric(["backchannel"], backchannel)
        weighed.add_metric(["stop"], stop)
        yield weighed
        yield CounterMetricFamily(
            "omni_held_words_unread",
            "Words heard over the reply that the recogniser guessed (below interruptions.unsure_below): not read",
            value=totals.get("held_words_unread", 0),
        )
        out_drop = CounterMetricFamily("omni_output_samples_dropped", "Output samples cut", labels=["why"])
        out_drop.add_metric(["backlog"], totals.get("output_dropped_samples", 0))
        out_drop.add_metric(["barge_in"], totals.get("output_flushed_samples", 0))
        out_drop.add_metric(["silence_trimmed"], totals.get("output_trimmed_samples", 0))
        yield out_drop


def _echo_families(live: list[SessionPump], totals: dict[str, float]) -> Iterable[Metric]:
    """The server's echo canceller: its work, the echo it took out, the echo paths' delays."""
    family = CounterMetricFamily("omni_echo_events", "What the echo canceller counted", labels=["event"])
    for k in (
        "frames",
        "skipped_frames",
        "bypassed_frames",
        "unvoiced_ticks",
        "voiced_ticks",
        "reference_frames",
        "reference_padded",
        "linear_frames",
    ):
        family.add_metric([k], totals.get(f"echo_{k}", 0))
    for k in ("reference_dropped", "failures", "linear_failures"):
        family.add_metric([k], totals.get(f"echo_{k}", 0))
    yield family
    yield CounterMetricFamily(
        "omni_echo_cpu_seconds", "CPU time in the echo canceller's processing", value=totals.get("echo_seconds", 0.0)
    )
    yield CounterMetricFamily(
        "omni_early_hold_cpu_seconds",
        "CPU time hearing speech over replies as it arrives (media.early_hold's voice detector)",
        value=totals.get("early_hold_seconds", 0.0),
    )
    energy_in, energy_out = totals.get("echo_in_energy", 0.0), totals.get("echo_out_energy", 0.0)
    if energy_in > 0:
        yield GaugeMetricFamily(
            "omni_echo_reduction_db",
            "Input over output energy while the agent's voice could be coming back, all sessions",
            value=10 * math.log10(energy_in / max(energy_out, 1e-3)),
        )
    delays = [p.echo.delay_ms for p in live if p.echo is not None and p.echo.delay_ms is not None]
    if delays:
        yield GaugeMetricFamily(
            "omni_echo_delay_ms", "The echo path's delay as estimated, mean of live sessions", sum(delays) / len(delays)
        )
