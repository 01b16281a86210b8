"""The command line and the YAML config reach what they configure."""

from __future__ import annotations

import argparse

import pytest

from agent.cli import _serve_args, build_config
from agent.engines import make_engine


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _serve_args(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


def test_the_chat_model_settings_reach_the_cascade(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_LLM_KEY", "k3y")
    for name in ("OMNI_LLM_URL", "OMNI_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    cfg = build_config(serve_args("--llm-url", "http://127.0.0.1:11434/v1", "--llm-model", "llama3.2:3b"))
    engine = make_engine(cfg.engine)
    assert engine.chat is not None
    assert (engine.chat.cfg.url, engine.chat.cfg.model, engine.chat.cfg.key) == (
        "http://127.0.0.1:11434/v1",
        "llama3.2:3b",
        "k3y",
    )
    assert engine.chat.client.api_key == "k3y"
    yaml = tmp_path / "llm.yaml"
    yaml.write_text(
        "engine:\n  name: cascade\n  llm:\n    url: http://127.0.0.1:8000/v1\n    model: qwen\n    timeout_s: 3\n"
    )
    from_file = build_config(serve_args("--config", str(yaml)))
    assert (from_file.engine.llm.url, from_file.engine.llm.model, from_file.engine.llm.timeout_s) == (
        "http://127.0.0.1:8000/v1",
        "qwen",
        3.0,
    )
    assert make_engine(build_config(serve_args()).engine).chat is None  # no URL: the offline keyword policies
    with pytest.raises(ValueError, match="--llm-model"):
        make_engine(build_config(serve_args("--llm-url", "http://127.0.0.1:9/v1")).engine)


def test_the_realtime_dialect_reaches_the_engine(tmp_path):
    args = serve_args("--engine", "realtime", "--realtime-url", "ws://127.0.0.1:9/v1/realtime")
    assert make_engine(build_config(args).engine).dialect.name == "openai"  # the default: server VAD
    args = serve_args("--engine", "realtime", "--realtime-url", "ws://x/v1/realtime", "--realtime-dialect", "dynamo")
    engine = make_engine(build_config(args).engine)
    assert engine.dialect.name == "dynamo" and engine.dialect.input_rate == 16_000
    yaml = tmp_path / "rt.yaml"
    yaml.write_text("engine:\n  name: realtime\n  options:\n    url: ws://x/v1/realtime\n    dialect: klingon\n")
    with pytest.raises(ValueError, match="unknown realtime dialect 'klingon'"):
        make_engine(build_config(serve_args("--config", str(yaml))).engine)


def test_the_ice_settings_from_the_command_line_and_the_yaml(tmp_path):
    cfg = build_config(serve_args("--ice-server", "turn:127.0.0.1:3478", "--turn-secret", "s", "--ice-relay-only"))
    assert (cfg.ice.servers, cfg.ice.secret, cfg.ice.relay_only) == (["turn:127.0.0.1:3478"], "s", True)
    static = build_config(serve_args("--turn-username", "u", "--turn-credential", "p"))
    assert (static.ice.username, static.ice.credential, static.ice.relay_only) == ("u", "p", False)
    yaml = tmp_path / "ice.yaml"
    yaml.write_text("ice:\n  servers: ['turn:127.0.0.1:3478']\n  secret: from-file\n  credential_ttl_s: 600\n")
    from_file = build_config(serve_args("--config", str(yaml)))
    assert (from_file.ice.secret, from_file.ice.credential_ttl_s) == ("from-file", 600)
