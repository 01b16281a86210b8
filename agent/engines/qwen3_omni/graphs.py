"""The decode steps as CUDA graphs: one per stage, batch bucket and read length, captured on first use.

Without graphs a batched step is thousands of small kernel launches (the
Talker's with its 15-step code predictor most of all), each paid on the host.
A graph replays them with one launch, if the step is the same kernels on the
same memory every time:

- fixed shapes: a step runs on a bucket of pool rows (1, 2, 4, 8, 16; the
  sessions' rows padded up to it) and reads a power-of-two length of memory;
- fixed storage: a step reads only buffers made with it (its inputs are
  copied in before each replay, its positions loaded in place by
  `BatchStep.load`) and the pools, which are replaced only when they grow or
  change dtype (their `generation`: the graphs made on them are then dropped);
- no host synchronisation inside a step: MoE experts by `grouped_mm`
  (histogram offsets, no `.nonzero()`), argmax and lookups on the device.

On the CPU the same steps run as they are (`capture=False`): the tests prove
those properties there (tests/agent/engines/qwen3_omni/test_graphs.py). A
capture that fails is said once in the log and everything goes on uncaptured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from agent.engines.qwen3_omni.slots import BatchStep

log = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16)
MIN_READ = 256  # shortest memory a graphed step reads: fewer graphs for short conversations

Outputs = dict[str, torch.Tensor]


def bucket(rows: int) -> int | None:
    """The smallest bucket that holds `rows`; None beyond the largest (that step runs uncaptured)."""
    return next((b for b in BUCKETS if b >= rows), None)


def read_bucket(longest: int, capacity: int) -> int:
    """A graphed step's read length: a power of two from MIN_READ, at most the pool's capacity."""
    return min(capacity, max(MIN_READ, 1 << (max(longest, 1) - 1).bit_length()))


@dataclass
class StaticStep:
    """A step function over its own buffers: `feed` copies the next inputs into them, `StepGraphs.run` runs it."""

    fn: Callable[[], Outputs]
    inputs: dict[str, torch.Tensor]
    step: BatchStep | None = None
    generation: Hashable = 0  # what it was made on (pools' and contexts' generations): stale when that moved on
    graph: Any = None
    outputs: Outputs | None = None

    def feed(self, **values: torch.Tensor) -> None:
        for name, value in values.items():
            self.inputs[name].copy_(value)

    def buffers(self) -> list[torch.Tensor]:
        """Every tensor a replay reads or writes apart from the pools (for the tests: their storage must stay)."""
        extra = [self.step.pos, self.step.row_ids, self.step.columns] if self.step is not None else []
        return [*self.inputs.values(), *extra, *(self.outputs or {}).values()]


@dataclass
class GraphStats:
    captured: int = 0
    replayed: int = 0
    uncaptured: int = 0  # steps run as they are (the CPU, beyond the largest bucket, or after a failed capture)
    built: int = 0  # static steps made: after warm-up a steady workload makes none


@dataclass
class StepGraphs:
    """The static steps of one streamer, keyed by (stage, rows, read); captured on CUDA unless capture failed."""

    device: torch.device
    capture: bool
    steps: dict[Hashable, StaticStep] = field(default_factory=dict)
    stats: GraphStats = field(default_factory=GraphStats)
    failed: str | None = None
    # for the tests: a context entered around every uncaptured run of a step (a dispatch-level spy)
    around: Callable[[Hashable], AbstractContextManager[Any]] = lambda key: nullcontext()
    _pool: Any = None

    def get(self, key: Hashable, generation: Hashable, build: Callable[[], StaticStep]) -> StaticStep:
        static = self.steps.get(key)
        if static is None or static.generation != generation:
            for stale in [k for k, s in self.steps.items() if s.generation != generation and k[0] == key[0]]:
                del self.steps[stale]
            static = self.steps[key] = build()
            static.generation = generation
            self.stats.built += 1
        return static

    def run(self, key: Hashable, static: StaticStep, capture: bool = True) -> Outputs:
        """The step's outputs: replayed if captured; else run, and on CUDA captured after that first run."""
        if static.graph is not None:
            static.graph.replay()
            self.stats.replayed += 1
            return static.outputs  # type: ignore[return-value]
        if not (capture and self.capture):
            self.stats.uncaptured += 1
            with self.around(key):
                return static.fn()
        return self._first_run_and_capture(key, static)

    def _first_run_and_capture(self, key: Hashable, static: StaticStep) -> Outputs:
        """The first run on a side stream (it is this step's real work, and the warm-up capture needs), then
        the capture, which runs nothing. A failure turns capture off for good, said once."""
        out: Outputs | None = None
        try:
            current = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                out = static.fn()
            current.wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                static.outputs = static.fn()
            static.graph = graph
            self.stats.captured += 1
        except Exception as exc:  # noqa: BLE001 - any failure: the steps still run, uncaptured
            self.capture = False
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("CUDA graph capture failed at %s (%s); the decode steps run without graphs", key, self.failed)
            static.graph = static.outputs = None
        self.stats.uncaptured += 1
        return out if out is not None else static.fn()


class ConvContexts:
    """The streaming conv stack's left contexts, one row per Code2Wav slot and a last spare row for padding:
    a graphed frame gathers its streams' rows and writes them back in place."""

    def __init__(self) -> None:
        self.buffers: dict[int, torch.Tensor] = {}
        self.generation = 0

    @property
    def spare(self) -> int:
        return next(iter(self.buffers.values())).shape[0] - 1

    def fit(self, like: dict[int, torch.Tensor], slots: int) -> None:
        """Room for `slots` streams, shaped like one stream's state `like` (rows kept when it grows)."""
        if self.buffers and self.spare >= slots:
            return
        old = self.buffers
        self.buffers = {k: v.new_zeros(slots + 1, *v.shape[1:]) for k, v in like.items()}
        for k, buf in old.items():
            self.buffers[k][: buf.shape[0] - 1] = buf[:-1]
        self.generation += 1

    def put(self, slot: int, state: dict[int, torch.Tensor]) -> None:
        for k, row in state.items():
            self.buffers[k][slot] = row[0]
