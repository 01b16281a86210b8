"""What CUDA-graph capture needs, proven on the CPU where the same static steps run uncaptured (`graphs.py`).

Each test fails when its invariant breaks: padding sessions into buckets changes their output; a step's buffers
move or new ones are made after warm-up; a step synchronises with the host or runs other ops for other inputs;
a failed capture stops the engine.
"""

from __future__ import annotations

import gc
import logging
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from agent.engines.qwen3_omni.graphs import bucket, read_bucket
from agent.engines.qwen3_omni.stream import OmniStreamer
from benchmarks.qwen3_omni import compare_graphs, staggered

# aten ops that wait for the device or read its data on the host: none may run inside a captured step
HOST_SYNC = {
    "_local_scalar_dense",  # .item(), bool(tensor), int(tensor)
    "nonzero",
    "masked_select",
    "unique",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "equal",
    "is_nonzero",
    "lift_fresh",  # torch.tensor(host data) inside the step: a copy from the host
    "lift_fresh_copy",
}


@pytest.fixture
def model(tiny):
    return tiny.model  # its experts implementation is put back after each test (conftest)


class Ops(TorchDispatchMode):
    """The aten ops one run of a step dispatches, with their output shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else ()
        self.ops.append((func._schema.name.split("::")[-1], shape))
        return out


def test_buckets_and_read_lengths():
    assert [bucket(n) for n in (1, 2, 3, 5, 8, 9, 16, 17)] == [1, 2, 4, 8, 8, 16, 16, None]
    assert [read_bucket(n, 8192) for n in (1, 256, 257, 1000, 9000)] == [256, 256, 512, 1024, 8192]
    assert read_bucket(300, 391) == 391  # never past the pool


def test_padding_sessions_into_buckets_changes_no_tokens_codes_or_samples(model):
    result = compare_graphs(model, "cpu", sessions=5)  # rows 1..5: buckets 1, 2, 4 and 8, padded
    print(result)
    assert result["frames"] > 40 and result["graphs"]["uncaptured"] > 50
    assert result["tokens_identical"] and result["codes_identical"]
    # batching alone moves this random model's samples by up to ~1e-3 (a session alone against the same
    # session in a batch of 4, eager); a padding row leaking into a stream's contexts moves them by far more
    assert result["max_sample_diff"] < 5e-3


def _persistent(s: OmniStreamer) -> dict[str, int]:
    """Where every buffer a captured step reads or writes lies: the static steps', the pools', the MTP's, the
    conv contexts'."""
    where = {}
    for key, static in s.graphs.steps.items():
        for i, t in enumerate(static.buffers()):
            where[f"{key}/{i}"] = t.data_ptr()
    for name, pool in (("thinker", s.thinker_pool), ("talker", s.talker_pool), ("c2w", s.c2w_pool)):
        for i, (k, v) in enumerate(zip(pool.keys, pool.values, strict=True)):
            where[f"{name}/{i}"] = k.data_ptr() + v.data_ptr()
    for batch, layers in s.mtp._buffers.items():
        where[f"mtp/{batch}"] = sum(k.data_ptr() + v.data_ptr() for k, v in layers)
    for k, buf in s.contexts.buffers.items():
        where[f"conv/{k}"] = buf.data_ptr()
    return where


def test_no_buffer_moves_and_none_is_made_across_fifty_steps_as_sessions_join_and_leave(model):
    s = OmniStreamer(model, graphs=True)
    staggered(model, s, 5, "cpu")  # warm-up: every shape this workload meets
    gc.collect()  # the warm-up's conversations give their rows back
    before, built, generations = _persistent(s), s.graphs.stats.built, _generations(s)
    runs = s.graphs.stats.uncaptured
    staggered(model, s, 5, "cpu")  # again: new conversations take the rows the old ones left
    assert s.graphs.stats.uncaptured - runs >= 50  # static steps run
    assert s.graphs.stats.built == built, "a static step was made after warm-up"
    assert _generations(s) == generations, "a pool was replaced"
    assert _persistent(s) == before


def _generations(s: OmniStreamer) -> tuple[int, ...]:
    return (s.thinker_pool.generation, s.talker_pool.generation, s.c2w_pool.generation, s.contexts.generation)


def test_a_step_makes_no_host_sync_and_the_same_ops_whatever_its_inputs(model):
    s = OmniStreamer(model, graphs=True)
    runs: dict = {}

    @contextmanager
    def spy(key):
        with Ops() as ops:
            yield
        runs.setdefault(key, []).append(ops.ops)

    s.graphs.around = spy
    staggered(model, s, 3, "cpu")
    assert {k[0] for k in runs} == {"thinker", "talker_mtp", "c2w", "conv"}
    for key, seen in runs.items():
        names = {name for ops in seen for name, _ in ops}
        assert not names & HOST_SYNC, f"{key}: {names & HOST_SYNC}"
        # the first run is the warm-up capture needs (it may make the step's buffers); then always the same ops
        assert all(ops == seen[-1] for ops in seen[1:]), f"{key}: other ops for other inputs"
    assert {k[0] for k, seen in runs.items() if len(seen) > 2} == {"thinker", "talker_mtp", "c2w", "conv"}
    # Python that reads a tensor on the host (.tolist(), `if tensor:`) dispatches nothing on the CPU: a fullgraph
    # trace of each static step breaks on it instead
    for static in s.graphs.steps.values():
        torch._dynamo.reset()
        torch.compile(static.fn, fullgraph=True, backend="eager")()
    # and the check sees a sync where there is one: the MoE experts' eager implementation calls nonzero()
    model.set_experts_implementation("eager")
    runs.clear()
    staggered(model, s, 1, "cpu", max_tokens=4, max_frames=4)
    assert any(name == "nonzero" for ops in runs[next(k for k in runs if k[0] == "thinker")] for name, _ in ops)


def test_a_capture_that_fails_is_said_once_and_the_steps_run_on(model, caplog):
    eager = staggered(model, OmniStreamer(model, graphs=False), 2, "cpu")
    s = OmniStreamer(model, graphs=True)
    s.graphs.capture = True  # as on CUDA: here the capture fails (no GPU)
    with caplog.at_level(logging.WARNING, logger="agent.engines.qwen3_omni.graphs"):
        graphed = staggered(model, s, 2, "cpu")
    failures = [r for r in caplog.records if "CUDA graph capture failed" in r.getMessage()]
    assert len(failures) == 1 and "without graphs" in failures[0].getMessage()
    assert s.graphs.capture is False and s.graphs.failed and s.graphs.stats.captured == 0
    assert [r["tokens"] for r in graphed] == [r["tokens"] for r in eager]
    assert [r["codes"] for r in graphed] == [r["codes"] for r in eager]


async def test_graphs_are_on_by_default_only_on_cuda_and_the_option_reaches_the_engine(tiny, model):
    from agent.cli import build_config
    from agent.engines.qwen3_omni.engine import QwenOmniEngine
    from tests.agent.test_cli import serve_args

    assert OmniStreamer(model).graphs is None  # the CPU: eager, as before
    assert OmniStreamer(model, graphs=True, slots=6).thinker_pool.slots == 8  # every bucket up to it fits
    assert build_config(serve_args("--engine", "qwen3-omni", "--no-cuda-graphs")).engine.options["cuda_graphs"] is False
    eng = QwenOmniEngine(loaded=tiny, cuda_graphs=True, warmup=False)
    try:
        assert eng.streamer.graphs is not None and not eng.streamer.graphs.capture  # asked for; uncaptured here
    finally:
        await eng.close()
