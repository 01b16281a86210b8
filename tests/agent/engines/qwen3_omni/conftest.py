import pytest

from agent.engines.qwen3_omni.loading import load
from agent.engines.qwen3_omni.tiny import build_tiny_model


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
