import pytest
import torch

from agent.engines.qwen3_omni.loading import load
from agent.engines.qwen3_omni.tiny import build_tiny_model


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The tiny models are dispatch-bound: a second intra-op thread only competes with the event loop's."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _experts_put_back(request):
    """A graphed streamer switches the model's MoE experts to grouped_mm; the shared tiny models get theirs back."""
    shared = [n for n in ("tiny", "tiny_seed1", "tiny_fast") if n in request.fixturenames]
    models = [request.getfixturevalue(n).model for n in shared]
    before = [m.get_experts_implementation() for m in models]
    yield
    for m, impl in zip(models, before, strict=True):
        m.set_experts_implementation(impl)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-omni") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    return load(str(tiny_folder), device="cpu", progress=False)


@pytest.fixture(scope="session")
def tiny_seed1(tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-omni-1") / "model", seed=1)
    return load(str(folder), device="cpu", progress=False)


@pytest.fixture(scope="session")
def tiny_fast(tmp_path_factory):
    """One layer, 4 codebooks, 2 decoder blocks: speech several times faster than real time on a slow CPU, for
    the tests that judge real-time behaviour (each checks the margin first: `support.require_realtime_margin`)."""
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-omni-fast") / "model", seed=0, fast=True)
    return load(str(folder), device="cpu", progress=False)
