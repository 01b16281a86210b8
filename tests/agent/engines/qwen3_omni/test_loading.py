"""Loading errors are one clear sentence, not a traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from agent.cli import main
from agent.engines.qwen3_omni.loading import ModelLoadError, check_gpu_memory, load


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load(str(tmp_path / "nope"), device="cpu", progress=False)


def test_a_file_is_not_a_folder(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is a file"):
        load(str(f), device="cpu", progress=False)


def test_incomplete_folder_names_what_is_missing(tiny_folder, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_folder, folder)
    (folder / "model.safetensors").unlink()
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"missing tokenizer_config\.json, \*\.safetensors"):
        load(str(folder), device="cpu", progress=False)


def test_missing_shard_and_wrong_model(tiny_folder, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_folder, folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00002.safetensors"}}))
    with pytest.raises(ModelLoadError, match="1 weight shard"):
        load(str(folder), device="cpu", progress=False)
    (folder / "model.safetensors.index.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="not Qwen3-Omni"):
        load(str(folder), device="cpu", progress=False)


def test_hub_id_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        load("Qwen/Qwen3-Omni-30B-A3B-Instruct", device="cpu", progress=False)


def test_too_little_gpu_memory():
    check_gpu_memory(70 * 2**30, 139 * 2**30, 140 * 2**30)
    with pytest.raises(ModelLoadError, match=r"not enough GPU memory: the weights take 70\.0 GiB"):
        check_gpu_memory(70 * 2**30, 40 * 2**30, 80 * 2**30)


def test_no_gpu_when_cuda_asked(tiny_folder, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine that has one
    with pytest.raises(ModelLoadError, match="sees no GPU"):
        load(str(tiny_folder), device="cuda", progress=False)


def test_the_cli_says_it_and_exits_2(tmp_path, capsys):
    assert main(["serve", "--engine", "qwen3-omni", "--model", str(tmp_path / "absent"), "--port", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_loads_with_a_progress_line(tiny_folder, capsys):
    loaded = load(str(tiny_folder), device="cpu")
    out = capsys.readouterr().out
    assert "loading Qwen3-Omni from" in out and "loaded in" in out
    assert loaded.attn == "sdpa" and loaded.model.config.model_type == "qwen3_omni_moe"


async def test_the_shipped_config_builds_the_engine(tiny):
    from agent.config import CONFIG_DIR, load_config
    from agent.engines.qwen3_omni.engine import QwenOmniEngine

    cfg = load_config(CONFIG_DIR / "qwen3_omni.yaml")
    assert cfg.engine.name == "qwen3-omni"
    eng = QwenOmniEngine(loaded=tiny, end_silence_ms=cfg.engine.end_silence_ms, **cfg.engine.options)
    try:
        assert eng.scheduler.batch_limit == cfg.engine.options["batch_limit"]
    finally:
        await eng.close()


def test_the_cli_without_a_model_says_so(capsys):
    from agent.config import CONFIG_DIR

    assert main(["serve", "--config", str(CONFIG_DIR / "qwen3_omni.yaml"), "--port", "0"]) == 2
    assert "needs a model" in capsys.readouterr().err


def test_without_torch_the_cli_says_what_to_install():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; sys.modules['torch'] = None; from agent.cli import main; "
        "sys.exit(main(['serve', '--engine', 'qwen3-omni', '--model', '/nowhere', '--port', '0']))"
    )
    root = Path(__file__).resolve().parents[4]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "needs torch and transformers (torch is missing)" in r.stderr
    assert "Traceback" not in r.stderr
