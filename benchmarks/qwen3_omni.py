"""Qwen3-Omni streamed through the scheduler: first packet, Thinker tokens/s, speech real-time factor per session.

N sessions each send one audio turn at the same moment; the scheduler serves
them batched. Figures per number of sessions:
- first packet: turn submitted (end of the user's turn) to its first speech frame (median, max);
- Thinker tokens/s: decode tokens made per second of Thinker time, all sessions;
- per_session_rtf: (Talker + MTP + Code2Wav time) / one session's seconds of speech: how long the machine
  works for each second that every session hears; under 1 keeps all of them real time;
- step_ms per stage (Thinker prefill, Thinker step, Talker step, MTP, Code2Wav), timed with CUDA events on a
  GPU, and ops_per_step: aten ops dispatched by one step of each stage at that batch size.

    python -m benchmarks.qwen3_omni                      # tiny random model, CPU
    python -m benchmarks.qwen3_omni --full --device cuda # the published 30B-A3B config, random bf16 weights
    python -m benchmarks.qwen3_omni --model PATH         # a real model folder

Prints a line per level and writes the JSON (--out) after each level, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agent.machine import machine

FULL_CONFIG = Path(__file__).resolve().parent.parent / "agent" / "engines" / "qwen3_omni" / "full_config.json"


def full_random(device: str):
    """The published architecture with random bf16 weights, built on the device (no download)."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    config = Qwen3OmniMoeConfig(**json.loads(FULL_CONFIG.read_text()))
    print("building the full-size model with random weights ...", flush=True)
    t0 = time.perf_counter()
    with torch.device(device):
        model = Qwen3OmniMoeForConditionalGeneration._from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # _init_weights leaves the Talker's experts empty
            if p.dim() > 1:
                p.normal_(0, 0.02, generator=gen)
    model.eval()
    n = sum(p.numel() for p in model.parameters())
    print(f"built {n / 1e9:.2f} B parameters in {time.perf_counter() - t0:.0f} s", flush=True)
    return model


def synthetic_turn(model, seconds: float, device):
    """An audio turn with the model's own special ids (no tokenizer needed): system, user audio, assistant."""
    from transformers import WhisperFeatureExtractor

    from agent.engines.qwen3_omni.prompt import audio_tokens
    from agent.engines.qwen3_omni.stream import TurnInput

    c, tc = model.config, model.config.thinker_config
    fe = WhisperFeatureExtractor(feature_size=tc.audio_config.num_mel_bins, sampling_rate=16000)
    rng = np.random.default_rng(0)
    t = np.arange(int(16000 * seconds)) / 16000
    audio = (0.2 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    feats = fe(audio, sampling_rate=16000, return_attention_mask=True, padding="longest", return_tensors="pt")
    n = audio_tokens(int(feats["attention_mask"].sum()), tc.audio_config.n_window)
    newline, text = (198, list(range(300, 330))) if c.im_start_token_id > 1000 else (10, list(range(40, 70)))
    ids = (
        [c.im_start_token_id, c.system_token_id, newline, *text, c.im_end_token_id, newline]
        + [c.im_start_token_id, c.user_token_id, newline, tc.audio_start_token_id]
        + [tc.audio_token_id] * n
        + [tc.audio_end_token_id, c.im_end_token_id, newline, c.im_start_token_id, c.assistant_token_id, newline]
    )
    dtype = model.thinker.dtype
    return TurnInput(ids, feats["input_features"].to(device, dtype), feats["attention_mask"].to(device))


class StageMeter:
    """Times every call of the streamer's stages (CUDA events on a GPU), or (`count_ops`) counts the aten ops of
    one call per stage and batch size with a TorchDispatchMode: a separate short run, so counting never slows
    the timed one."""

    STAGES = {
        "thinker_prefill": "prefill",
        "thinker_step": "thinker_step",
        "talker_step": "talker_step",
        "mtp": "predict_residuals",
        "code2wav": "decode_frames",
    }

    def __init__(self, streamer, device: str, count_ops: bool = False) -> None:
        self.cuda = str(device).startswith("cuda")
        self.count_ops = count_ops
        self.ms: dict[str, list[float]] = {k: [] for k in self.STAGES}
        self.ops: dict[str, dict[int, int]] = {k: {} for k in self.STAGES}
        self.streamer = streamer
        for stage, method in self.STAGES.items():
            setattr(streamer, method, self._wrap(stage, getattr(streamer, method)))
        self._inner = False  # the MTP runs inside the Talker step: its time and ops count apart

    def _wrap(self, stage: str, fn):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        meter = self

        class Count(TorchDispatchMode):
            n = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                Count.n += 1
                return func(*args, **(kwargs or {}))

        def batch_of(args) -> int:
            first = args[0]
            return len(first) if isinstance(first, list) else int(first.shape[0]) if hasattr(first, "shape") else 1

        def wrapped(*args, **kwargs):
            batch = batch_of(args)
            if meter.count_ops:
                if batch in meter.ops[stage] or meter._inner:
                    return fn(*args, **kwargs)
                Count.n = 0
                meter._inner = True
                try:
                    with Count():
                        out = fn(*args, **kwargs)
                finally:
                    meter._inner = False
                meter.ops[stage][batch] = Count.n
                return out
            if meter.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = fn(*args, **kwargs)
                end.record()
                end.synchronize()
                meter.ms[stage].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                out = fn(*args, **kwargs)
                meter.ms[stage].append((time.perf_counter() - t0) * 1000)
            return out

        return wrapped

    def close(self) -> None:
        """The streamer's own methods back (it is used again for the next level, its graphs kept)."""
        for method in self.STAGES.values():
            vars(self.streamer).pop(method, None)

    def summary(self) -> dict:
        """Per stage: median and mean ms of a step (the Talker step's include its MTP), and ops per batch size."""
        step = {
            k: {"median": statistics.median(v), "mean": statistics.fmean(v)} if v else None for k, v in self.ms.items()
        }
        return {"step_ms": step}

    def ops_summary(self) -> dict:
        return {k: {str(b): n for b, n in sorted(v.items())} for k, v in self.ops.items()}


def run(
    streamer, sessions: int, seconds: float, batch_limit: int, max_tokens: int, max_frames: int, device, count_ops=False
) -> dict:
    import torch

    from agent.engines.qwen3_omni.scheduler import Scheduler
    from agent.engines.qwen3_omni.stream import Conversation, Reply

    model = streamer.model
    meter = StageMeter(streamer, device, count_ops)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def clock() -> float:
        sync()
        return time.perf_counter()

    sched = Scheduler(streamer, batch_limit=batch_limit, max_ahead_s=1e9, clock=clock)
    turns = [synthetic_turn(model, seconds, device) for _ in range(sessions)]
    t0 = clock()
    for i, turn in enumerate(turns):
        sched.submit(i, Reply(Conversation(), True, max_tokens, max_frames), turn)
    first: dict[int, float] = {}
    tokens = frames = 0
    while sched.has_work():
        for out in sched.step():
            if out.kind == "frame":
                frames += 1
                first.setdefault(out.key, clock() - t0)
            elif out.kind == "token":
                tokens += 1
            elif out.kind == "error":
                raise out.value
    wall = clock() - t0
    meter.close()
    st = sched.stats
    speech_s = frames * 0.08
    one_session_s = speech_s / sessions
    tts = st.stage_s["talker"] + st.stage_s["code2wav"] + st.stage_s["talker_prefill"]
    fp = sorted(first.values())
    if count_ops:
        return {"ops_per_step": meter.ops_summary()}
    return {
        "sessions": sessions,
        "audio_turn_s": seconds,
        "first_packet_ms": {
            "median": statistics.median(fp) * 1000,
            "max": fp[-1] * 1000,
            "all": [round(x * 1000, 1) for x in fp],
        },
        "thinker_tokens_per_s": tokens / max(st.stage_s["thinker"] + st.stage_s["prefill"], 1e-9),
        "per_session_rtf": tts / max(one_session_s, 1e-9),
        "wall_rtf": wall / max(one_session_s, 1e-9),
        "frames": frames,
        "tokens": tokens,
        "prefill_ms_per_turn": st.stage_s["prefill"] / sessions * 1000,
        "max_batch": st.max_batch,
        "wall_s": wall,
        **meter.summary(),
        **memory(device),
    }


def memory(device) -> dict:
    """GPU memory in GiB: peak allocated since the last call, and reserved by the allocator now."""
    import torch

    if not str(device).startswith("cuda"):
        return {}
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    return {"gpu_memory_gib": {"peak_allocated": peak / 2**30, "reserved": reserved / 2**30}}


def staggered(
    model, streamer, sessions: int, device, max_tokens: int = 24, max_frames: int = 24, only: int | None = None
) -> list[dict]:
    """Sessions joining one step apart and leaving at different lengths, each turn of another length: every
    session's tokens, codes and samples (what graphs and eager must agree on). `only`: that session alone."""
    import torch

    from agent.engines.qwen3_omni.scheduler import Scheduler
    from agent.engines.qwen3_omni.stream import Conversation, Reply

    sched = Scheduler(streamer, batch_limit=16, max_ahead_s=1e9)
    which = list(range(sessions)) if only is None else [only]
    replies = {i: Reply(Conversation(), True, max_tokens - i, max_frames - 2 * i) for i in which}
    samples: dict[int, list[np.ndarray]] = {i: [] for i in which}
    waiting = list(which)
    while waiting or sched.has_work():
        if waiting:
            i = waiting.pop(0)
            sched.submit(i, replies[i], synthetic_turn(model, 0.5 + 0.25 * i, device))
        for out in sched.step():
            if out.kind == "frame":
                samples[out.key].append(out.value)
            elif out.kind == "error":
                raise out.value
    return [
        {
            "tokens": replies[i].tokens,
            "codes": torch.stack(replies[i].frames).tolist() if replies[i].frames else [],
            "samples": np.concatenate(samples[i]) if samples[i] else np.zeros(0, np.float32),
        }
        for i in which
    ]


def _agreement(a: list[dict], b: list[dict]) -> dict:
    pairs = list(zip(a, b, strict=True))
    return {
        "tokens_identical": all(x["tokens"] == y["tokens"] for x, y in pairs),
        "codes_identical": all(x["codes"] == y["codes"] for x, y in pairs),
        "max_sample_diff": max(
            float(np.abs(x["samples"] - y["samples"]).max(initial=0.0))
            if x["samples"].shape == y["samples"].shape
            else float("inf")
            for x, y in pairs
        ),
    }


def ieee_float32() -> None:
    """float32 as IEEE everywhere. cuDNN runs float32 convolutions in TF32 by default (10-bit mantissa), which the
    top-level setting does not override (torch 2.11): Code2Wav's random conv stack amplifies that rounding to
    whole samples."""
    import torch

    torch.backends.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"


def compare_graphs(model, device, sessions: int = 4) -> dict:
    """The same staggered sessions with the decode steps eager and as graphs (on the CPU: uncaptured). Where
    they were captured, also against the same padded steps uncaptured: that must agree to the bit."""
    from agent.engines.qwen3_omni.stream import OmniStreamer

    eager = staggered(model, OmniStreamer(model, graphs=False), sessions, device)
    streamer = OmniStreamer(model, graphs=True)
    graphed = staggered(model, streamer, sessions, device)
    stats = streamer.graphs.stats
    doc = {
        "sessions": sessions,
        **_agreement(eager, graphed),
        "frames": sum(len(g["codes"]) for g in graphed),
        "graphs": {"captured": stats.captured, "replayed": stats.replayed, "uncaptured": stats.uncaptured},
        "capture_failed": streamer.graphs.failed,
    }
    if stats.captured:
        plain = OmniStreamer(model, graphs=True)
        plain.graphs.capture = False
        doc["captured_vs_uncaptured"] = _agreement(staggered(model, plain, sessions, device), graphed)
    return doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a Qwen3-Omni folder (default: a tiny random one)")
    ap.add_argument("--full", action="store_true", help="the published config with random weights")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sessions", default="1,4,8")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each user audio turn")
    ap.add_argument("--batch-limit", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-frames", type=int, default=64)
    ap.add_argument(
        "--graphs", action=argparse.BooleanOptionalAction, default=None, help="CUDA graphs (default: on with CUDA)"
    )
    ap.add_argument(
        "--compare-graphs",
        action="store_true",
        help="instead: staggered sessions with graphs and eager (float32), tokens/codes/samples compared",
    )
    ap.add_argument(
        "--tf32",
        action="store_true",
        help="with --compare-graphs: leave CUDA's float32 convolutions on TF32 (its default) to see what it moves",
    )
    ap.add_argument("--out", default="qwen3_omni_bench.json")
    args = ap.parse_args(argv)

    import torch

    from agent.engines.qwen3_omni.stream import OmniStreamer

    torch.set_grad_enabled(False)
    if args.full:
        model, what = full_random(args.device), "Qwen3-Omni-30B-A3B config, random bf16 weights"
    else:
        from agent.engines.qwen3_omni.loading import load
        from agent.engines.qwen3_omni.tiny import build_tiny_model

        folder = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
        model = load(str(folder), device=args.device).model
        what = "tiny random model" if not args.model else str(folder)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else machine()
    doc = {"model": what, "device": args.device, "device_name": device_name, "torch": torch.__version__}
    if args.compare_graphs:
        if not args.tf32:
            ieee_float32()
        doc["fp32_precision"] = {
            "conv": torch.backends.cudnn.conv.fp32_precision,
            "matmul": torch.backends.cuda.matmul.fp32_precision,
        }
        sys.exit(_compare(model.float(), args, doc))  # float32: padding moves bf16 logits enough to flip ties
    streamer = OmniStreamer(model, graphs=args.graphs, slots=args.batch_limit)
    graphs = streamer.graphs
    doc["cuda_graphs"] = graphs is not None and graphs.capture
    doc["results"] = []
    for n in [int(x) for x in args.sessions.split(",")]:
        # a warm-up at this level: kernels, allocator, and the graphs its shapes need (captured on first use)
        run(streamer, n, args.seconds, args.batch_limit, 8, 8, args.device)
        captured = graphs.stats.captured if graphs else 0
        r = run(streamer, n, args.seconds, args.batch_limit, args.max_tokens, args.max_frames, args.device)
        if graphs:
            r["graphs"] = {"captured_in_run": graphs.stats.captured - captured, "total": graphs.stats.captured}
            r["graphs"]["capture_failed"] = graphs.failed
        # long enough replies that all n sessions are in one batch for a while (one prefill per step)
        r.update(run(streamer, n, 2.0, args.batch_limit, 3 * n, 3 * n, args.device, count_ops=True))
        doc["results"].append(r)
        Path(args.out).write_text(json.dumps(doc, indent=1))  # after each level: a cut-short run keeps it
        step = {k: round(v["median"], 2) for k, v in r["step_ms"].items() if v}
        print(
            f"{n:>2} sessions: first packet median {r['first_packet_ms']['median']:.0f} ms "
            f"(max {r['first_packet_ms']['max']:.0f}), Thinker {r['thinker_tokens_per_s']:.0f} tok/s, "
            f"per-session RTF {r['per_session_rtf']:.3f}, step ms (median) {step}, "
            f"ops per step {r['ops_per_step']}, {r.get('gpu_memory_gib', '')} {r.get('graphs', '')}",
            flush=True,
        )
    print(f"wrote {args.out}")


def _compare(model, args, doc: dict) -> int:
    """Graphs against eager on staggered sessions; exit status 1 unless tokens and codes agree and samples are
    within float rounding (eager batching alone moves the tiny model's by up to ~1e-3)."""
    result = compare_graphs(model, args.device, sessions=5)
    doc["compare_graphs"] = result
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(result, indent=1))
    checks = [result["tokens_identical"], result["codes_identical"], result["max_sample_diff"] < 5e-3]
    if "captured_vs_uncaptured" in result:
        exact = result["captured_vs_uncaptured"]
        checks += [exact["tokens_identical"], exact["codes_identical"], exact["max_sample_diff"] < 1e-5]
    ok = all(checks) and result["graphs"]["captured"] > 0 if args.device.startswith("cuda") else all(checks)
    print(f"graphs vs eager: {'ok' if ok else 'FAILED'}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    main()
